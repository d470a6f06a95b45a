#!/bin/sh
# One Ethernet segment for N droce processes on one machine (conf/ranks.conf):
#
#   droce-netns.sh up N     veth pairs droce0..droce<N-1>: each droce<i> stays in this network
#                           namespace, up, without addresses (rank i opens it with af_packet);
#                           its peer dp<i> joins bridge droce-br0 inside namespace $DROCE_NETNS
#                           (default droce-br), so every rank reaches every other
#   droce-netns.sh down     removes every link and the namespace this script created
#   droce-netns.sh status   lists them
#
# Idempotent: `up` keeps what it already made and adds what is missing; `down` twice is fine.
# Everything it creates carries the interface alias "droce-netns:<namespace>"; it refuses to
# touch a droce<i> link or a namespace that lacks that mark. Needs root (CAP_NET_ADMIN) and
# iproute2.
set -eu

NS=${DROCE_NETNS:-droce-br}
BR=droce-br0
MARK="droce-netns:$NS"

die() { echo "droce-netns: $*" >&2; exit 1; }

# (iproute2 only: /sys/class/net shows the namespace sysfs was mounted in, not ours)
exists() { ip link show dev "$1" >/dev/null 2>&1; }

ours() { # ours LINK: is LINK (in this namespace) one of ours?
    [ "$(ip -o link show dev "$1" 2>/dev/null | sed -n 's/.* alias \([^ \\]*\).*/\1/p')" = "$MARK" ]
}

droce_links() { ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^droce[0-9]+$' || true; }

ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$NS"; }

ns_ours() { [ "$(ip -n "$NS" -o link show dev "$BR" 2>/dev/null | sed -n 's/.* alias \([^ \\]*\).*/\1/p')" = "$MARK" ]; }

up() {
    n=$1
    case $n in ''|*[!0-9]*) die "up wants a count, e.g. up 4" ;; esac
    [ "$n" -ge 1 ] && [ "$n" -le 64 ] || die "up N: N from 1 to 64"
    # check everything before changing anything
    if ns_exists && ! ns_ours; then
        die "namespace $NS exists but was not created by this script (no bridge $BR marked '$MARK'); set DROCE_NETNS to another name"
    fi
    i=0
    while [ "$i" -lt "$n" ]; do
        if exists "droce$i" && ! ours "droce$i"; then
            die "link droce$i exists but was not created by this script (alias is not '$MARK'); not touching it"
        fi
        i=$((i + 1))
    done
    if ! ns_exists; then
        ip netns add "$NS"
        ip -n "$NS" link set lo up
        ip -n "$NS" link add "$BR" type bridge forward_delay 0 mcast_snooping 0
        ip -n "$NS" link set "$BR" alias "$MARK"
        ip -n "$NS" link set "$BR" up
    fi
    i=0
    while [ "$i" -lt "$n" ]; do
        l=droce$i
        if ! exists "$l"; then
            # DPDK 22.11's af_packet PMD joins PACKET_FANOUT group (pid ^ ifindex) & 0xffff, and
            # two ranks whose values collide fail ("could not set PACKET_FANOUT ... Invalid
            # argument"). Indexes that agree in their low 16 bits make the group the pid's.
            ip link add "$l" index $(( (i + 1) * 65536 + 17522 )) type veth peer name "dp$i" netns "$NS" 2>/dev/null ||
                ip link add "$l" type veth peer name "dp$i" netns "$NS"
            ip link set "$l" alias "$MARK"
            ip -n "$NS" link set "dp$i" alias "$MARK"
            ip -n "$NS" link set "dp$i" master "$BR"
            # no kernel address (not even IPv6 link-local) on our end: only droce speaks there
            ip link set "$l" addrgenmode none 2>/dev/null || true
        fi
        ip link set "$l" up
        ip -n "$NS" link set "dp$i" up
        i=$((i + 1))
    done
    echo "droce-netns: droce0..droce$((n - 1)) up, bridged in namespace $NS"
}

down() {
    removed=0
    for l in $(droce_links); do
        if ours "$l"; then
            ip link del "$l" && removed=$((removed + 1))
        fi
    done
    if ns_exists; then
        if ns_ours; then
            ip netns del "$NS"
            echo "droce-netns: removed $removed links and namespace $NS"
        else
            echo "droce-netns: removed $removed links; namespace $NS was not created by this script: left alone" >&2
        fi
    else
        echo "droce-netns: removed $removed links"
    fi
}

status() {
    for l in $(droce_links); do
        if ours "$l"; then echo "$l $(ip -o link show dev "$l" | sed -n 's/.* state \([A-Z]*\).*/\1/p')"; fi
    done
    if ns_exists && ns_ours; then
        echo "namespace $NS: $(ip -n "$NS" -o link show master "$BR" | awk -F': ' '{print $2}' | cut -d@ -f1 | tr '\n' ' ')"
    fi
}

case ${1:-} in
    up) up "${2:-}" ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up N | down | status   (namespace: DROCE_NETNS, default droce-br)" >&2; exit 2 ;;
esac
