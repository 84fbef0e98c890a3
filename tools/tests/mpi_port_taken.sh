#!/usr/bin/env bash
# The launcher's MASTER_PORT taken by another process before rank 0 binds it: what happened in CI
# when `ddplab launch --backend mpi` had found a free ephemeral port and mpirun's own sockets took
# it (rank 1 reached that listener: "Connection reset by peer"). A listener here holds the port the
# job is given and resets every connection; the job must still run, since over MPI rank 0 serves
# its store on a port the kernel picks and broadcasts it.
#   mpi_port_taken.sh DDPLAB OUT_DIR -- PROGRAM ARGS...   (PROGRAM's reports: OUT_DIR/rank{rank}.json)
set -euo pipefail
DDPLAB=$1 OUT=$2
shift 2
[ "${1:-}" = "--" ] && shift
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
rm -rf "$OUT" && mkdir -p "$OUT"
"$PY" - "$OUT/port" <<'PYEOF' &
import socket, struct, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    c, _ = s.accept()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = reset
    c.close()
PYEOF
squatter=$!
trap 'kill $squatter 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$OUT/port" ] && break; sleep 0.1; done
[ -s "$OUT/port" ] || { echo "mpi_port_taken: FAILED: the listener did not start" >&2; exit 1; }
PORT=$(cat "$OUT/port")
echo "mpi_port_taken: port $PORT held by pid $squatter; launching with --master-port $PORT"
"$DDPLAB" launch -n 2 --backend mpi --master-port "$PORT" -- "$@"
