# Helpers shared by hack/cluster.sh and hack/node.sh (sourced, not run): processes by pid file,
# the one wait helper, client certificates and kubeconfigs. The caller defines $run (pid files),
# $logs (log files), $bin (kubectl's directory, for write_kubeconfig) and a log() function.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() {  # start NAME CMD...: CMD in its own session, appending to logs/NAME.log; pid in run/NAME.pid
  local name=$1; shift
  printf '%s\0' "$@" > "$run/$name.cmd"  # for a restart with the same command line
  setsid "$@" >>"$logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$run/$name.pid"
}

alive() {  # alive NAME: running (a killed process not yet reaped by its new parent is a zombie: not alive)
  local pid; pid=$(cat "$run/$1.pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]
}

exited() { ! kill -0 "$1" 2>/dev/null; }  # exited PID

stop_pid() {  # stop_pid NAME: TERM, wait up to 10 s, then KILL; the process group goes too
  local name=$1 pidfile=$run/$1.pid pid
  [[ -f $pidfile ]] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    wait_for -q "$name to exit" 10 exited "$pid" || true
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    log "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
}

# wait_for [-q] WHAT SECONDS CMD...: until CMD succeeds (every 0.1 s, every 0.3 s after the first
# 2 s). After SECONDS: with -q, returns 1; without, shows the logs and exits 1. The one retry loop.
wait_for() {
  local quiet=0; [[ $1 != -q ]] || { quiet=1; shift; }
  local what=$1 secs=$2 tries=0; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS > deadline )); then
      ((quiet)) && return 1
      log "$what not ready after ${secs}s; see $logs"; tail -n 20 "$logs"/*.log >&2; exit 1
    fi
    if (( ++tries < 20 )); then sleep 0.1; else sleep 0.3; fi
  done
}

# sign_cert CA_DIR OUT SUBJECT DAYS EXTFILE: OUT.key and OUT.crt (a fresh RSA key; OUT.csr kept),
# signed by CA_DIR/ca.crt with the extensions of EXTFILE; the serial file is ca.srl beside OUT
sign_cert() {
  local ca=$1 out=$2 subj=$3 days=$4 ext=$5
  openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$out.key" -out "$out.csr" 2>/dev/null
  openssl x509 -req -in "$out.csr" -CA "$ca/ca.crt" -CAkey "$ca/ca.key" -CAcreateserial \
    -CAserial "$(dirname "$out")/ca.srl" -days "$days" -extfile "$ext" -out "$out.crt" 2>/dev/null
}

# sign_client_cert CA_DIR OUT SUBJECT DAYS: a client certificate (extendedKeyUsage clientAuth)
sign_client_cert() {
  local ext; ext=$(dirname "$2")/client.ext
  printf 'extendedKeyUsage=clientAuth\n' >"$ext"
  sign_cert "$1" "$2" "$3" "$4" "$ext"
}

# write_kubeconfig OUT SERVER CA_CRT CERT_PREFIX USER: context local, certificates embedded,
# mode 600, written whole (OUT.tmp, then renamed)
write_kubeconfig() {
  local out=$1 server=$2 ca=$3 cert=$4 user=$5 k=("$bin/kubectl" --kubeconfig "$1.tmp")
  rm -f "$out.tmp"
  "${k[@]}" config set-cluster local --server "$server" --certificate-authority "$ca" --embed-certs >/dev/null
  "${k[@]}" config set-credentials "$user" --client-certificate "$cert.crt" --client-key "$cert.key" --embed-certs >/dev/null
  "${k[@]}" config set-context local --cluster local --user "$user" >/dev/null
  "${k[@]}" config use-context local >/dev/null
  chmod 600 "$out.tmp"; mv "$out.tmp" "$out"
}
