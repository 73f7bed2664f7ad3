# Shared by bin/rabbitmq-node and bin/rabbitmq-cluster (sourced, never run).

# shellcheck source=ports.sh
. "$(dirname "${BASH_SOURCE[0]}")/ports.sh"

# start_epmd PIDFILE OUT ADDRESS [PREFIX...]: an epmd of our own on
# $ERL_EPMD_PORT, unless the one in PIDFILE still runs; PREFIX runs it
# elsewhere (ip netns exec NS). Started before any rabbitmqctl, which would
# otherwise start a daemon of its own that we could not stop by pid.
start_epmd() {
  local pidfile=$1 out=$2 address=$3
  shift 3
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then return; fi
  # Another program on its port: epmd would exit at once, and the node after it.
  refuse_taken_ports "RabbitMQ's epmd (Erlang's name server)" --in "$@" -- "$ERL_EPMD_PORT" || exit 1
  # A simple command in the background: $! is epmd's own pid, for `stop`.
  "$@" setsid epmd -port "$ERL_EPMD_PORT" -address "$address" >"$out" 2>&1 </dev/null &
  echo $! >"$pidfile"
  sleep 0.3
}

# boot_failure LABEL LOG SIZE SERVER_OUT [PORT...]: why a node's boot failed, on
# stderr: the "Error during startup" its LOG gained past its first SIZE bytes, on
# one line, and what eaddrinuse means; else the end of SERVER_OUT; then what
# holds any of its PORTs now (one taken for a moment fails a boot too).
boot_failure() {
  local label=$1 log=$2 size=$3 out=$4 error port
  shift 4
  # `|| true`: a node that died before writing its LOG leaves no file to tail,
  # and under pipefail that would end the script before its sentence.
  error=$(tail -c +$((size + 1)) "$log" 2>/dev/null | awk '
    /Error during startup/ { block = ""; on = 1 }
    on { line = $0; sub(/^[^>]*> ?/, "", line); if (line == "") { on = 0; next } block = block " " line }
    END { print block }' | tr -s ' ') || true
  echo "$label did not start: its boot failed (see $(dirname "$log"))." >&2
  if [ -z "$error" ]; then
    tail -5 "$out" >&2 2>/dev/null || true
  else
    echo " ${error:0:400}" >&2
    if [[ $error == *eaddrinuse* ]]; then
      port=$(grep -o 'could_not_start_listener,"[^"]*",[0-9]*' <<<"$error" | grep -o '[0-9]*$' || true)
      echo " eaddrinuse: ${port:+port $port, }one of the ports it listens on, is taken by another program." >&2
    fi
  fi
  [ $# -eq 0 ] || refuse_taken_ports "$label" "$@" || true
}
