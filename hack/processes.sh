# Process helpers shared by hack/cluster.sh and hack/node.sh (sourced, not run). The caller
# defines $run (pid files), $logs (log files) and a log() function.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() {  # start NAME CMD...: CMD in its own session, appending to logs/NAME.log; pid in run/NAME.pid
  local name=$1; shift
  printf '%s\0' "$@" > "$run/$name.cmd"  # for a restart with the same command line
  setsid "$@" >>"$logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$run/$name.pid"
}

stop_pid() {  # stop_pid NAME: TERM, wait up to 10 s, then KILL; the process group goes too
  local name=$1 pidfile=$run/$1.pid pid
  [[ -f $pidfile ]] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    log "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
}

wait_for() {  # wait_for WHAT SECONDS CMD...: until CMD succeeds; after SECONDS, show the logs and exit 1
  local what=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS > deadline )); then log "$what not ready after ${secs}s; see $logs"; tail -n 20 "$logs"/*.log >&2; exit 1; fi
    sleep 0.3
  done
}
