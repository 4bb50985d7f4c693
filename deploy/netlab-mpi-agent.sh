#!/bin/sh
# netlab-mpi-agent: MPI's remote-launch agent across deploy/netlab.sh hosts, in place of ssh.
# netlab gives it to its leader's ddpbenchd (--mpi-agent), whose launcher "mpirun" runs
# with `nodes` > 1 then pass it to OpenMPI (--mca plm_rsh_agent) and MPICH's hydra
# (-launcher ssh -launcher-exec). Both call it the way they call ssh:
#
#   netlab-mpi-agent.sh [ssh options] HOST COMMAND...
#
# HOST is a netlab host's address (the leader's placement names followers by the address
# they joined with); COMMAND is the MPI daemon's command line (orted ..., or
# "/usr/bin/hydra_pmi_proxy" ...), quoted for a remote shell as ssh would pass it on.
#
# Decisions:
# - (a) `ip netns exec` into HOST's namespace, not (b) a request to HOST's ddpbenchd.
#   netlab's hosts are namespaces of one machine, so the namespace is all that differs:
#   the MPI daemon runs as a child of this agent (mpirun sees it live and exit as it
#   would an ssh session, and its stdio is mpirun's), and the files, the run directory
#   (DDPB_LOG_DIR) and the environment mpirun passes are the same. Valid only under
#   netlab (root, one machine). A real cluster without ssh needs (b): a ddpbench program
#   that sends {run, secret, argv} to HOST's follower, which starts the MPI daemon only
#   for a run its leader told it of, only orted/hydra_pmi_proxy of the installed MPI
#   (the command tokenized without a shell), in that run's process group, relaying its
#   stdio over the connection and killing it at the run's end (docs/design.md).
# - The namespace is found, not configured: this agent runs inside the leader's (PREFIX-h0,
#   `ip netns identify`), and HOST's is the PREFIX-hN whose addresses include HOST. So two
#   netlabs with different NETLAB_PREFIX on one machine never reach each other's hosts,
#   and an address no host of this netlab has is refused, naming it.
# - ssh's options (hydra passes -x) are skipped: there is no session to configure.
set -eu

die() {
    echo "netlab-mpi-agent: $*" >&2
    exit 255 # ssh's status for a failure of its own
}

while [ $# -gt 0 ]; do
    case "$1" in
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
    esac
done
[ $# -ge 2 ] || die "usage: $0 [options] HOST COMMAND..."
host=$1
shift
case "$host" in
*[!0-9A-Za-z.:-]*) die "bad host '$host'" ;;
esac

self=$(ip netns identify $$ 2>/dev/null) || self=""
case "$self" in
*-h[0-9]*) prefix=${self%-h*} ;;
*) die "not inside a netlab host's namespace (ip netns identify: '${self}')" ;;
esac

target=""
for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    case "$ns" in
    "$prefix"-h*) ;;
    *) continue ;;
    esac
    case "${ns#"$prefix"-h}" in
    '' | *[!0-9]*) continue ;;
    esac
    if ip -n "$ns" -o addr show 2>/dev/null | grep -qF " $host/"; then
        target=$ns
        break
    fi
done
[ -n "$target" ] || die "no host of netlab $prefix has address $host"

# ssh hands the words to the remote shell joined by spaces; so does this
exec ip netns exec "$target" /bin/sh -c "$*"
