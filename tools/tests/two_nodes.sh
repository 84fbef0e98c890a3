#!/usr/bin/env bash
# A real two-node job on one machine: two network namespaces joined by a veth pair, each one a
# "machine" with its own network stack and address (10.77.0.1, 10.77.0.2; they exist only inside
# the namespaces this script makes, so no traffic leaves them). Each runs
#   ddplab launch -n 1 --nnodes 2 --node-rank R --master-addr 10.77.0.1 --master-port P -- PROGRAM ...
# with GLOO_SOCKET_IFNAME naming its end of the pair. Fails (exit 1), never skips, if the
# namespaces cannot be made: the test needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
#   two_nodes.sh DDPLAB PROGRAM OUT_DIR PORT -- PROGRAM_ARGS...   (reports: OUT_DIR/rank{rank}.json)
set -euo pipefail
DDPLAB=$1 PROGRAM=$2 OUT=$3 PORT=$4
shift 4
[ "${1:-}" = "--" ] && shift
tag=$$
NS=(ddplab-node0-$tag ddplab-node1-$tag)
IF=(ddn0-$tag ddn1-$tag)
ADDR=(10.77.0.1 10.77.0.2)
cleanup() {
  for ns in "${NS[@]}"; do ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true; done
  for ns in "${NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT
fail() { echo "two_nodes: FAILED: $*" >&2; exit 1; }

command -v ip > /dev/null || fail "no 'ip' command (Debian: iproute2)"
for i in 0 1; do
  ip netns add "${NS[$i]}" 2> "$OUT.err" || fail "cannot create network namespace ${NS[$i]} ($(cat "$OUT.err")); the test needs root with CAP_SYS_ADMIN and CAP_NET_ADMIN"
done
ip link add "${IF[0]}" type veth peer name "${IF[1]}" || fail "cannot create a veth pair"
for i in 0 1; do
  ip link set "${IF[$i]}" netns "${NS[$i]}"
  ip -n "${NS[$i]}" addr add "${ADDR[$i]}/24" dev "${IF[$i]}"
  ip -n "${NS[$i]}" link set "${IF[$i]}" up
  ip -n "${NS[$i]}" link set lo up
done
echo "two_nodes: namespaces ${NS[*]}, node 0 at ${ADDR[0]} (${IF[0]}), node 1 at ${ADDR[1]} (${IF[1]})"

rm -rf "$OUT"
mkdir -p "$OUT"
pids=()
for i in 0 1; do
  ip netns exec "${NS[$i]}" env GLOO_SOCKET_IFNAME="${IF[$i]}" \
    "$DDPLAB" launch -n 1 --nnodes 2 --node-rank "$i" --master-addr "${ADDR[0]}" --master-port "$PORT" --timeout 240 \
    -- "$PROGRAM" "$@" --report "$OUT/rank{rank}.json" > "$OUT/node$i.log" 2>&1 &
  pids+=($!)
done
status=0
for i in 0 1; do
  if ! wait "${pids[$i]}"; then
    echo "two_nodes: node $i's launcher failed; its output:" >&2
    cat "$OUT/node$i.log" >&2
    status=1
  fi
done
[ $status -eq 0 ] || fail "a node failed"
cat "$OUT/node0.log" "$OUT/node1.log"
for r in 0 1; do
  [ -f "$OUT/rank$r.json" ] || fail "rank $r wrote no report"
  grep -q '"status": *"ok"' "$OUT/rank$r.json" || fail "rank $r's report does not say status ok"
done
d0=$(grep -o '"final_digest": *"[0-9a-f]*"' "$OUT/rank0.json")
d1=$(grep -o '"final_digest": *"[0-9a-f]*"' "$OUT/rank1.json")
[ -n "$d0" ] && [ "$d0" = "$d1" ] || fail "the nodes end with different parameters ($d0 vs $d1)"
grep -q "node 1" "$OUT/node1.log" || fail "node 1's rank does not say it is on node 1"
echo "two_nodes: both nodes done, identical parameters ($d0)"
