# Two stand-in nodes on one machine, sourced by bench/two_nodes.sh and
# tests/e2e/test_two_nodes.sh (docs/multinode.md, "What was tested here").
#
# two_nodes_up        two network namespaces (duet-nodeA, duet-nodeB) joined
#                     by a veth pair, 10.231.0.1 and .2 (TN_NET), each with
#                     /etc/netns/<ns>/hosts naming nodeA and nodeB; a hostfile
#                     of one slot per node (TN_HOSTS) and an rsh agent that
#                     enters the other namespace instead of ssh (TN_AGENT).
#                     Fails when a namespace of that name exists already.
# two_nodes_shape R   tc's token bucket at rate R ("1gbit") on both ends.
# two_nodes_mpirun A… mpirun (killed after TN_TIMEOUT s, default 1800) with the hostfile, the agent and TCP over the
#                     veth alone (--mca btl self,tcp, btl/oob_tcp_if_include),
#                     launched from nodeA under its own hostname; A… are
#                     mpirun's further arguments and the program.
# two_nodes_down      removes all of it (idempotent; call it from a trap).
# Each namespace also gets its own UTS namespace per process (hostname nodeA
# or nodeB), so that Open MPI sees two hosts and never pairs the ranks over
# shared memory. Nothing leaves the machine. Needs root (ip netns, tc,
# unshare).

TN_NSA=duet-nodeA
TN_NSB=duet-nodeB
TN_IPA=10.231.0.1
TN_IPB=10.231.0.2
TN_NET=10.231.0.0/24
TN_TMP=""

two_nodes_down() {
    ip netns del "$TN_NSA" 2>/dev/null || true
    ip netns del "$TN_NSB" 2>/dev/null || true
    rm -rf "/etc/netns/$TN_NSA" "/etc/netns/$TN_NSB"
    [ -n "$TN_TMP" ] && rm -rf "$TN_TMP"
    TN_TMP=""
}

two_nodes_up() {
    local t ns
    [ "$(id -u)" -eq 0 ] || { echo "two nodes: needs root (network namespaces, tc)" >&2; return 1; }
    for t in ip tc unshare mpirun; do
        command -v "$t" >/dev/null || { echo "two nodes: $t not found" >&2; return 1; }
    done
    for ns in "$TN_NSA" "$TN_NSB"; do
        if ip netns list | grep -qw "$ns"; then
            echo "two nodes: namespace $ns exists (another run?); remove it with: ip netns del $ns" >&2
            return 1
        fi
    done
    TN_TMP="$(mktemp -d)"
    ip netns add "$TN_NSA" && ip netns add "$TN_NSB" &&
        ip link add duet-va type veth peer name duet-vb &&
        ip link set duet-va netns "$TN_NSA" && ip link set duet-vb netns "$TN_NSB" &&
        ip -n "$TN_NSA" addr add "$TN_IPA/24" dev duet-va &&
        ip -n "$TN_NSB" addr add "$TN_IPB/24" dev duet-vb &&
        ip -n "$TN_NSA" link set lo up && ip -n "$TN_NSB" link set lo up &&
        ip -n "$TN_NSA" link set duet-va up && ip -n "$TN_NSB" link set duet-vb up ||
        { echo "two nodes: could not make the namespaces and their link" >&2; return 1; }
    # `ip netns exec` mounts /etc/netns/NS/hosts over /etc/hosts: the node
    # names resolve inside the namespaces only.
    for ns in "$TN_NSA" "$TN_NSB"; do
        mkdir -p "/etc/netns/$ns"
        printf '127.0.0.1 localhost\n%s nodeA\n%s nodeB\n' "$TN_IPA" "$TN_IPB" > "/etc/netns/$ns/hosts"
    done
    # Open MPI's rsh agent: `agent HOST COMMAND...`, COMMAND for a remote shell.
    TN_AGENT="$TN_TMP/agent"
    cat > "$TN_AGENT" <<EOF
#!/bin/sh
host="\$1"; shift
case "\$host" in
  nodeA) ns=$TN_NSA ;;
  nodeB) ns=$TN_NSB ;;
  *) echo "two nodes agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$host && \$*"
EOF
    chmod +x "$TN_AGENT"
    TN_HOSTS="$TN_TMP/hosts"
    printf 'nodeA slots=1\nnodeB slots=1\n' > "$TN_HOSTS"
}

two_nodes_shape() { # RATE
    ip netns exec "$TN_NSA" tc qdisc replace dev duet-va root tbf rate "$1" burst 1mb latency 50ms &&
        ip netns exec "$TN_NSB" tc qdisc replace dev duet-vb root tbf rate "$1" burst 1mb latency 50ms
}

two_nodes_mpirun() { # mpirun's further arguments and the program
    # hwloc's rtc component has crashed Open MPI 4's orted inside a network
    # namespace: not needed here (no binding).
    ip netns exec "$TN_NSA" unshare --uts sh -c 'hostname nodeA && exec "$@"' sh \
        timeout -k 10 "${TN_TIMEOUT:-1800}" \
        mpirun --allow-run-as-root --hostfile "$TN_HOSTS" --bind-to none \
        --mca plm_rsh_agent "$TN_AGENT" --mca rtc ^hwloc --mca btl self,tcp \
        --mca btl_tcp_if_include "$TN_NET" --mca oob_tcp_if_include "$TN_NET" \
        -x PATH ${LD_LIBRARY_PATH:+-x LD_LIBRARY_PATH} "$@"
}
