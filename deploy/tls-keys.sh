#!/bin/sh
# tls-keys.sh: a cluster's TLS keys, made once per cluster: a CA of its own and, for each
# node, a certificate that CA signs.
#
#   deploy/tls-keys.sh DIR [NAME[=ADDR,ADDR...]]...      (default NAME: leader)
#
# writes DIR/ca.pem (give it to followers as --join-ca and to clients as --ca / DDPB_CA),
# DIR/ca.key, and DIR/NAME.pem + DIR/NAME.key for each NAME (give them to that node's
# ddpbenchd as --tls-cert / --tls-key). Each certificate is valid for NAME, localhost,
# 127.0.0.1, ::1 and each ADDR (an IP address or a DNS name), for 825 days. Keys are
# mode 0600; an existing CA in DIR is reused, so nodes can be added later; an existing
# node certificate is replaced.
#
# Decision: a private CA per cluster, never a public one: followers pin exactly this CA
# (ddpbenchd --join-ca), so a certificate from anywhere else cannot impersonate the
# leader. ECDSA P-256 keys: small and fast to handshake. openssl is the tool (Debian
# package openssl, in deploy/install-deps.sh).
set -eu

usage() {
    echo "usage: $0 DIR [NAME[=ADDR,ADDR...]]..." >&2
    exit 2
}
[ $# -ge 1 ] || usage
case "$1" in -h | --help) usage ;; esac
dir=$1
shift
[ $# -ge 1 ] || set -- leader
command -v openssl >/dev/null || {
    echo "$0: openssl not found (deploy/install-deps.sh installs it)" >&2
    exit 1
}
umask 077
mkdir -p "$dir"

newkey() { # $1: the key file, made mode 0600
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
    chmod 600 "$1"
}

if [ ! -s "$dir/ca.pem" ] || [ ! -s "$dir/ca.key" ]; then
    newkey "$dir/ca.key"
    openssl req -x509 -new -key "$dir/ca.key" -out "$dir/ca.pem" -days 3650 \
        -subj "/CN=ddpbench cluster CA $(date -u +%Y%m%dT%H%M%SZ)" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi
chmod 644 "$dir/ca.pem"

for spec in "$@"; do
    name=${spec%%=*}
    addrs=
    [ "$name" = "$spec" ] || addrs=${spec#*=}
    case "$name" in
    "" | *[!A-Za-z0-9._-]*)
        echo "$0: '$name': a node name is letters, digits, '.', '_' or '-'" >&2
        exit 2
        ;;
    esac
    san="DNS:$name,DNS:localhost,IP:127.0.0.1,IP:::1"
    old_ifs=$IFS
    IFS=,
    for a in $addrs; do
        case "$a" in
        *[!0-9.]* | "") case "$a" in *:*) san="$san,IP:$a" ;; *) san="$san,DNS:$a" ;; esac ;;
        *) san="$san,IP:$a" ;;
        esac
    done
    IFS=$old_ifs
    newkey "$dir/$name.key"
    ext=$(mktemp)
    printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n' \
        "$san" >"$ext"
    openssl req -new -key "$dir/$name.key" -subj "/CN=$name" 2>/dev/null |
        openssl x509 -req -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
            -CAserial "$dir/ca.srl" -days 825 -extfile "$ext" -out "$dir/$name.pem" 2>/dev/null
    rm -f "$ext"
    chmod 644 "$dir/$name.pem"
    echo "$dir/$name.pem ($san)"
done
