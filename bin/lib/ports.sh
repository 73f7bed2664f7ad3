# Shared by the start scripts (bin/run, bin/rabbitmq-node, bin/rabbitmq-cluster,
# bin/redis-node, bin/postgres-cluster): sourced, never run.

# port_holder PORT [PREFIX...]: what listens on TCP PORT, as "NAME (pid N: ARGS)",
# "another program" when ss cannot name it (not ours to see), or nothing when
# the port is free. PREFIX runs ss elsewhere (ip netns exec NS).
port_holder() {
  local port=$1 line users pid name args
  shift
  line=$("$@" ss -Hltnp "sport = :$port" 2>/dev/null | head -1 || true)
  [ -n "$line" ] || return 0
  users=$(grep -o 'users:((.*' <<<"$line" || true)
  if [ -z "$users" ]; then echo "another program (run ss -ltnp as root to see which)"; return 0; fi
  name=$(sed 's/^users:(("\([^"]*\)".*/\1/' <<<"$users")
  pid=$(sed -n 's/^[^)]*pid=\([0-9]*\).*/\1/p' <<<"$users")
  args=$(ps -o args= -p "$pid" 2>/dev/null | cut -c1-120 || true)
  echo "$name (pid $pid${args:+: $args})"
}

# refuse_taken_ports LABEL [--in PREFIX... --] PORT...: when any PORT has a
# listener, say on stderr which port and what holds it, and return 1; a server
# started then would only fail (RabbitMQ after a 5 s wait, with its reason in a
# log of its own).
refuse_taken_ports() {
  local label=$1 port holder taken=0 prefix=()
  shift
  if [ "${1:-}" = --in ]; then
    shift
    while [ "$1" != -- ]; do prefix+=("$1"); shift; done
    shift
  fi
  for port in "$@"; do
    holder=$(port_holder "$port" "${prefix[@]}")
    [ -n "$holder" ] || continue
    echo "$label cannot start: port $port is taken by $holder." >&2
    taken=1
  done
  if [ "$taken" = 1 ]; then
    echo " Stop that program, or choose other ports (bin/run: PORT, NIGHTJAR_BROKER_PORT)." >&2
  fi
  return "$taken"
}
