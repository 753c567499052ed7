#!/usr/bin/env bash
# bench/uring-probe/run.sh GONSQ [ROUNDS]: the io_uring experiment of issue 32.
#
# Starts the probe server (target/release/uring-probe, `cargo build --release` here) with each
# back end in turn, alternating, and drives it with go-nsq publishers (GONSQ: bench/gonsq built
# with `go build`): 8 synchronous Producers (`-mode pub`) and one Producer shared by 8
# goroutines (`-mode pub -shared`, pipelined). Prints the rate, the server's CPU per message
# (utime+stime from /proc) and, with SYSCALLS=1, its system calls per message (perf stat).
# With NSQD=path/to/nsqd (and REF=path/to/another/nsqd, e.g. NSQ's), that daemon (default
# flags, a fresh data directory) runs the same loads in the same rounds, for scale.
set -euo pipefail
GONSQ=${1:?usage: run.sh GONSQ [ROUNDS]}; ROUNDS=${2:-3}; RUNFOR=${RUNFOR:-5s}
HERE=$(cd "$(dirname "$0")" && pwd); PROBE=$HERE/target/release/uring-probe
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
one() { # backend mode
  local port; port=$(free_port)
  local data=""
  if [[ $1 == nsqd || $1 == ref ]]; then
    data=$(mktemp -d)
    local bin=$NSQD; [[ $1 == ref ]] && bin=$REF
    "$bin" --data-path="$data" --tcp-address="127.0.0.1:$port" --http-address=127.0.0.1:0 >/dev/null 2>&1 & 
  else
    "$PROBE" --backend "$1" --threads "${THREADS:-1}" --addr "127.0.0.1:$port" &
  fi
  local pid=$!
  for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
  local shared=""; [[ $2 == shared ]] && shared=-shared
  local perf="" out; out=$(mktemp)
  if [[ -n ${SYSCALLS:-} ]]; then
    perf stat -x, -o "$out" -e raw_syscalls:sys_enter,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_io_uring_enter,context-switches -p "$pid" & perf=$!
    sleep 0.3
  fi
  local c0 c1 o; c0=$(cpu $pid)
  o=$("$GONSQ" -mode pub $shared -addr "127.0.0.1:$port" -runfor "$RUNFOR")
  c1=$(cpu $pid)
  [[ -n $perf ]] && { kill -INT $perf; wait $perf || true; }
  kill $pid; wait $pid 2>/dev/null || true
  [[ -n $data ]] && rm -rf "$data"
  local n rate; n=$(grep -o 'msgs=[0-9]*' <<<"$o" | cut -d= -f2); rate=$(grep -o 'msgs_per_sec=[0-9]*' <<<"$o" | cut -d= -f2)
  printf '%-6s %-6s rate %7s msgs/s  cpu %6.2f us/msg' "$1" "$2" "$rate" "$(awk -v c=$((c1-c0)) -v n="$n" 'BEGIN{print c*1e4/n}')"
  [[ -n $perf ]] && awk -F, -v n="$n" '/sys_enter|context/ {nm=$3; sub(/.*:sys_enter_?/,"",nm); if(nm=="")nm="all"; printf "  %s %.2f", nm, $1/n}' "$out"
  echo; rm -f "$out"
}
for r in $(seq "$ROUNDS"); do
  for mode in sync shared; do for b in epoll uring ring ${NSQD:+nsqd} ${REF:+ref}; do one $b $mode; done; done
done
