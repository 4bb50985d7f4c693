#!/bin/bash
# netlab: one machine as a cluster. Emulated hosts are network namespaces joined by veth
# links to a bridge in a namespace of its own, each link shaped with tc to a network
# profile, and one ddpbenchd per host started inside its namespace.
#
#   deploy/netlab.sh up --nodes N --profile P [--port-base PORT] [--dir DIR] [--build DIR]
#                       [--tls]          (HTTPS: keys made by deploy/tls-keys.sh in DIR/tls)
#                       [--no-daemons]   (the hosts and links only: another cluster manager,
#                                         e.g. the Slurm of tests/integration/slurmlab.py)
#   deploy/netlab.sh status [--dir DIR]
#   deploy/netlab.sh exec HOST_INDEX COMMAND...   (runs COMMAND inside host's namespace)
#   deploy/netlab.sh down [--dir DIR]
#
# Profiles: 1gbe, 10gbe, 25gbe (bandwidth shaped on every host link's egress, both ways:
# the host's side and the bridge's side) and unshaped (veth as fast as the CPU copies).
# Runs as root (ip netns, tc). Environment: NETLAB_PREFIX (default ddpbnl) prefixes every
# namespace, so `down` removes exactly what `up` made; NETLAB_SUBNET (default 10.213.0)
# the /24 the hosts' addresses come from (host i is .(10+i)).
#
# Decisions:
# - Nothing in the root namespace is touched: no address, route, link or qdisc. Each
#   veth pair is created inside a host namespace with its peer placed straight into the
#   bridge namespace, so a crash leaves nothing behind that deleting the namespaces (what
#   `down` does, idempotently) does not remove. The hosts are reached from the root
#   namespace only through `netlab.sh exec` (ip netns exec).
# - Bandwidth only. This kernel may lack netem (delay, loss); `up` reports which qdiscs
#   it offers (tbf, htb, netem) and says delay emulation is unavailable rather than
#   faking latency with something else. tbf shapes when present, htb otherwise.
# - One cluster: host 0's daemon leads, every other host's daemon joins it (--join) with
#   a token written to DIR/token (mode 0600, passed by file, never on a command line), and
#   `up` returns once the leader lists every follower up. Submit to the leader; a spec's
#   `nodes`/`ranks_per_node` spread its ranks over the hosts, so their traffic crosses the
#   shaped links. Each daemon has --network-profile P, so every run names the network it
#   measured over and results never pool it with another's.
# - launcher "mpirun" with `nodes` > 1 runs without ssh: the leader gets --mpi-agent
#   deploy/netlab-mpi-agent.sh, which starts MPI's daemon in the named host's namespace.
# - --tls: the cluster over HTTPS. `up` makes a CA and a certificate per host (its
#   namespace's name and address) with deploy/tls-keys.sh in DIR/tls; every daemon serves
#   with its own, the followers join https:// pinned to DIR/tls/ca.pem (--join-ca), and
#   netlab's own curl calls verify against it too. Reach the API with --cacert (curl) or
#   --ca / DDPB_CA (ddpbench) DIR/tls/ca.pem.
set -eu

PREFIX=${NETLAB_PREFIX:-ddpbnl}
SUBNET=${NETLAB_SUBNET:-10.213.0}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BR_NS="$PREFIX-br"
CURL_CA=() # --cacert DIR/tls/ca.pem once the cluster is over TLS (tls_curl_ca)

die() {
    echo "netlab: $*" >&2
    exit 1
}

usage() {
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

host_ns() { echo "$PREFIX-h$1"; }

# netlab's curl against a TLS cluster verifies it with the cluster's CA (DIR/tls/ca.pem).
tls_curl_ca() {
    if [ -s "$1/tls/ca.pem" ]; then CURL_CA=(--cacert "$1/tls/ca.pem"); else CURL_CA=(); fi
}
host_addr() { echo "$SUBNET.$((10 + $1))"; }

# The rate of a profile (tc's syntax), "" for unshaped; an unknown name fails.
profile_rate() {
    case "$1" in
    1gbe) echo 1gbit ;;
    10gbe) echo 10gbit ;;
    25gbe) echo 25gbit ;;
    unshaped) echo "" ;;
    *) die "--profile must be 1gbe, 10gbe, 25gbe or unshaped, got '$1'" ;;
    esac
}

# Our namespaces, one a line (ip netns list prints "NAME (id: N)").
our_namespaces() {
    ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$PREFIX-(br|h[0-9]+)\$" || true
}

# Which qdiscs the kernel offers, tried on the bridge namespace's own loopback.
qdisc_offered() {
    local q=$1 args
    case "$q" in
    tbf) args="tbf rate 1gbit burst 64kb latency 10ms" ;;
    htb) args="htb default 1" ;;
    netem) args="netem delay 1ms" ;;
    esac
    # shellcheck disable=SC2086
    if ip netns exec "$BR_NS" tc qdisc add dev lo root $args 2>/dev/null; then
        ip netns exec "$BR_NS" tc qdisc del dev lo root 2>/dev/null || true
        return 0
    fi
    return 1
}

# Shapes dev's egress in namespace ns to rate with the qdisc given (tbf or htb). tbf's
# burst is 4 ms at the rate (at least 64 KiB): a kernel tick at HZ=250, so the bucket
# refills between ticks and the long-run rate is the one asked.
shape_link() {
    local ns=$1 dev=$2 rate=$3 qdisc=$4 bits
    bits=${rate%gbit}000000000
    if [ "$qdisc" = tbf ]; then
        local burst=$((bits / 8 / 250))
        [ "$burst" -ge 65536 ] || burst=65536
        ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" \
            latency 50ms
    else
        ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: htb default 10
        ip netns exec "$ns" tc class add dev "$dev" parent 1: classid 1:10 htb rate "$rate" \
            ceil "$rate" quantum 60000
    fi
}

# Waits up to 15 s for host i's daemon to answer /healthz inside its namespace.
wait_healthy() {
    local i=$1 url=$2 pid=$3 log=$4 t=0
    while [ $t -lt 150 ]; do
        kill -0 "$pid" 2>/dev/null || die "host $i: ddpbenchd exited: $(tail -n 5 "$log")"
        if ip netns exec "$(host_ns "$i")" curl "${CURL_CA[@]}" -sf -o /dev/null \
            "$url/healthz"; then
            return 0
        fi
        sleep 0.1
        t=$((t + 1))
    done
    die "host $i: ddpbenchd did not answer $url/healthz in 15 s: $(tail -n 5 "$log")"
}

# Starts host i's daemon inside its namespace (host 0 leads, the others join it); prints
# nothing, records its pid.
start_daemon() {
    local i=$1 port=$2 profile=$3 dir=$4 daemon=$5 ns addr state role=() tls=() scheme=http
    ns=$(host_ns "$i")
    addr=$(host_addr "$i")
    state="$dir/h$i"
    mkdir -p "$state"
    # the leader starts launcher mpirun's MPI daemons on the other hosts with netlab's
    # agent (ip netns exec: deploy/netlab-mpi-agent.sh says why not ssh)
    if [ "$i" -eq 0 ]; then
        role=(--mpi-agent "$SRC/deploy/netlab-mpi-agent.sh")
    else
        role=(--join "$(cat "$dir/h0/url")")
    fi
    if [ ${#CURL_CA[@]} -gt 0 ]; then # --tls: its own certificate; followers pin the CA
        scheme=https
        tls=(--tls-cert "$dir/tls/$ns.pem" --tls-key "$dir/tls/$ns.key")
        [ "$i" -eq 0 ] || tls+=(--join-ca "$dir/tls/ca.pem")
    fi
    # setsid: the daemon outlives this script and a Ctrl-C in the shell that ran it
    ip netns exec "$ns" setsid "$daemon" --host "$addr" --port "$port" --store-host "$addr" \
        --state-dir "$state" --node "$ns" --network-profile "$profile" \
        --token-file "$dir/token" "${role[@]}" "${tls[@]}" \
        >"$state/daemon.log" 2>&1 </dev/null &
    echo $! >"$state/pid"
    wait_healthy "$i" "$scheme://$addr:$port" "$!" "$state/daemon.log"
    echo "$scheme://$addr:$port" >"$state/url"
}

# Waits up to 15 s until the leader lists all n nodes up.
wait_followers() {
    local n=$1 url=$2 dir=$3 t=0 up
    while [ $t -lt 150 ]; do
        up=$(ip netns exec "$(host_ns 0)" curl "${CURL_CA[@]}" -sf "$url/v1/nodes" |
            grep -o '"state":"up"' | wc -l) || up=0
        [ "$up" -ge "$n" ] && return 0
        sleep 0.1
        t=$((t + 1))
    done
    die "only $up of $n nodes joined the leader in 15 s: $(tail -n 3 "$dir/h1/daemon.log" 2>/dev/null)"
}

cmd_up() {
    local nodes="" profile="" port_base=7480 dir="" build="$SRC/build" daemons=1 use_tls=""
    while [ $# -gt 0 ]; do
        case "$1" in
        --nodes) nodes=${2:-}; shift 2 ;;
        --profile) profile=${2:-}; shift 2 ;;
        --port-base) port_base=${2:-}; shift 2 ;;
        --dir) dir=${2:-}; shift 2 ;;
        --build) build=${2:-}; shift 2 ;;
        --no-daemons) daemons=""; shift ;;
        --tls) use_tls=1; shift ;;
        *) die "up: unknown option '$1' (see --help)" ;;
        esac
    done
    case "$nodes" in
    '' | *[!0-9]*) die "--nodes must be an integer from 1 to 200, got '$nodes'" ;;
    esac
    if [ "$nodes" -lt 1 ] || [ "$nodes" -gt 200 ]; then
        die "--nodes must be 1 to 200, got $nodes"
    fi
    case "$port_base" in
    '' | *[!0-9]*) die "--port-base must be a port number, got '$port_base'" ;;
    esac
    [ $((port_base + nodes)) -le 65535 ] || die "--port-base $port_base leaves no port for host $((nodes - 1))"
    [ -n "$profile" ] || die "up: --profile is required (1gbe, 10gbe, 25gbe, unshaped)"
    local rate
    rate=$(profile_rate "$profile")
    dir=${dir:-/tmp/ddpbench-netlab-$PREFIX}
    local daemon="$build/daemon/ddpbenchd"
    [ -z "$daemons" ] || [ -x "$daemon" ] || die "no ddpbenchd at $daemon (build first, or give --build DIR)"
    [ "$(id -u)" -eq 0 ] || die "up needs root (ip netns, tc)"
    [ -z "$(our_namespaces)" ] || die "namespaces $PREFIX-* exist already: run 'netlab.sh down' first"

    mkdir -p "$dir"
    echo "$profile" >"$dir/profile"
    echo "$PREFIX" >"$dir/prefix"
    # from here a failure (set -e, or die's exit) removes what was made
    trap 'echo "netlab: up failed; removing what it made" >&2; cmd_down --dir "$dir" >/dev/null 2>&1 || true' EXIT
    ip netns add "$BR_NS"
    ip -n "$BR_NS" link set lo up
    ip -n "$BR_NS" link add br0 type bridge
    ip -n "$BR_NS" link set br0 up

    local have="" q
    for q in tbf htb netem; do
        if qdisc_offered "$q"; then have="$have $q"; fi
    done
    echo "netlab: kernel qdiscs:${have:- none of tbf, htb, netem}"
    case " $have " in
    *" netem "*) echo "netlab: delay emulation: netem present (profiles shape bandwidth only)" ;;
    *) echo "netlab: delay emulation: unavailable (no netem in this kernel); bandwidth only" ;;
    esac
    local qdisc=""
    if [ -n "$rate" ]; then
        case " $have " in
        *" tbf "*) qdisc=tbf ;;
        *" htb "*) qdisc=htb ;;
        *) die "profile $profile needs tbf or htb, and this kernel has neither" ;;
        esac
    fi

    local i ns
    for i in $(seq 0 $((nodes - 1))); do
        ns=$(host_ns "$i")
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip -n "$ns" link add eth0 type veth peer name "h$i" netns "$BR_NS"
        ip -n "$ns" addr add "$(host_addr "$i")/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$BR_NS" link set "h$i" master br0
        ip -n "$BR_NS" link set "h$i" up
        if [ -n "$rate" ]; then
            shape_link "$ns" eth0 "$rate" "$qdisc"
            shape_link "$BR_NS" "h$i" "$rate" "$qdisc"
        fi
    done
    echo "netlab: $nodes hosts on $SUBNET.0/24, profile $profile${qdisc:+ ($qdisc $rate each way)}"

    if [ -z "$daemons" ]; then
        trap - EXIT
        for i in $(seq 0 $((nodes - 1))); do
            echo "host $i: $(host_ns "$i") $(host_addr "$i")"
        done
        return 0
    fi
    (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/token")
    rm -rf "$dir/tls" # keys of an earlier `up` name other hosts; a cluster gets its own CA
    if [ -n "$use_tls" ]; then
        local names=()
        for i in $(seq 0 $((nodes - 1))); do names+=("$(host_ns "$i")=$(host_addr "$i")"); done
        "$SRC/deploy/tls-keys.sh" "$dir/tls" "${names[@]}" >/dev/null
    fi
    tls_curl_ca "$dir"
    for i in $(seq 0 $((nodes - 1))); do # host 0 first: the leader
        start_daemon "$i" $((port_base + i)) "$profile" "$dir" "$daemon"
    done
    wait_followers "$nodes" "$(cat "$dir/h0/url")" "$dir"
    trap - EXIT
    echo "leader: $(cat "$dir/h0/url")   (host 0; $((nodes - 1)) follower(s) joined; token in $dir/token)"
    [ -z "$use_tls" ] || echo "TLS: the cluster's CA is $dir/tls/ca.pem (curl --cacert, ddpbench --ca)"
    for i in $(seq 0 $((nodes - 1))); do
        echo "host $i: $(host_ns "$i") $(cat "$dir/h$i/url")"
    done
    echo "reach them with: $0 exec HOST_INDEX curl ${CURL_CA[*]:+${CURL_CA[*]} }URL/healthz"
}

# The state folder of `down` and `status`, whose only option is --dir: printed on stdout
# (default /tmp/ddpbench-netlab-PREFIX); anything else is refused naming the command.
state_dir_option() {
    local cmd=$1 dir=""
    shift
    while [ $# -gt 0 ]; do
        case "$1" in
        --dir) dir=${2:-}; shift 2 ;;
        *) die "$cmd: unknown option '$1' (see --help)" ;;
        esac
    done
    echo "${dir:-/tmp/ddpbench-netlab-$PREFIX}"
}

cmd_down() {
    local dir
    dir=$(state_dir_option down "$@") || exit 1
    local ns pids p
    for ns in $(our_namespaces); do
        # the daemons and their workers: every process in our namespaces, by id
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
    done
    for _ in $(seq 1 50); do
        pids=""
        for ns in $(our_namespaces); do pids="$pids$(ip netns pids "$ns" 2>/dev/null || true)"; done
        [ -n "$pids" ] || break
        sleep 0.1
    done
    for ns in $(our_namespaces); do
        for p in $(ip netns pids "$ns" 2>/dev/null || true); do kill -KILL "$p" 2>/dev/null || true; done
        ip netns del "$ns" # its links (veth ends, the bridge) and qdiscs go with it
    done
    rm -f "$dir"/h*/pid "$dir"/h*/url
    echo "netlab: down (no $PREFIX-* namespace left; state kept under $dir)"
}

cmd_status() {
    local dir
    dir=$(state_dir_option status "$@") || exit 1
    local nss
    nss=$(our_namespaces)
    if [ -z "$nss" ]; then
        echo "netlab: down"
        return 0
    fi
    echo "netlab: up, profile $(cat "$dir/profile" 2>/dev/null || echo '?')"
    tls_curl_ca "$dir"
    local ns i state url
    for ns in $nss; do
        [ "$ns" != "$BR_NS" ] || continue
        i=${ns#"$PREFIX-h"}
        url=$(cat "$dir/h$i/url" 2>/dev/null || echo "?")
        if ip netns exec "$ns" curl "${CURL_CA[@]}" -sf -o /dev/null --max-time 2 \
            "$url/healthz" 2>/dev/null; then
            state=up
        else
            state=down
        fi
        echo "host $i: $ns $(host_addr "$i") daemon $state ($([ "$i" -eq 0 ] && echo leader ||
            echo follower)) $url; qdisc:" \
            "$(ip netns exec "$ns" tc qdisc show dev eth0 2>/dev/null | head -n 1)"
    done
    url=$(cat "$dir/h0/url" 2>/dev/null || echo "?")
    echo "cluster (the leader's GET /v1/nodes): $(ip netns exec "$(host_ns 0)" \
        curl "${CURL_CA[@]}" -sf \
        --max-time 2 "$url/v1/nodes" 2>/dev/null | grep -o '"state":"[a-z]*"' |
        sort | uniq -c | tr -s ' \n' ' ' || echo unreachable)"
}

cmd_exec() {
    [ $# -ge 2 ] || die "exec: HOST_INDEX COMMAND..."
    local i=$1
    shift
    case "$i" in '' | *[!0-9]*) die "exec: host index must be a number, got '$i'" ;; esac
    exec ip netns exec "$(host_ns "$i")" "$@"
}

[ $# -ge 1 ] || usage 2
sub=$1
shift
case "$sub" in
up) cmd_up "$@" ;;
down) cmd_down "$@" ;;
status) cmd_status "$@" ;;
exec) cmd_exec "$@" ;;
-h | --help | help) usage 0 ;;
*) die "unknown command '$sub' (up, down, status, exec)" ;;
esac
