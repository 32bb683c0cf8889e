#!/usr/bin/env bash
# A private single-node SLURM cluster for tests: munge, slurmctld and slurmd on this machine,
# with every file (config, key, sockets, state, logs, PID files) under DIR and ports of its own.
# The one file outside DIR is a link /etc/slurm/slurm.conf -> DIR/slurm.conf (the SLURM executor
# plugin runs `srun` inside each job without SLURM_CONF, so the default path must hold the
# config): where that file already exists, a cluster is configured here and `start` leaves it
# alone (exit 2). `stop` removes the link.
#
#   tests/slurm/cluster.sh start DIR   # up and idle within a minute, or exit 1 saying why
#   tests/slurm/cluster.sh stop DIR    # stop the daemons started in DIR, by their PIDs
#
# Clients reach it with `export SLURM_CONF=DIR/slurm.conf` (DIR/env holds that line). Needs root
# and the Debian packages slurmctld, slurmd, slurm-client and munge; without them `start` exits 2
# and says what is missing. No accounting database (use --slurm-status-command squeue), no
# systemd, no cgroups: proctrack/linuxproc and task/none.
set -euo pipefail

usage() {
    echo "usage: $0 start|stop DIR" >&2
    exit 64
}
[ $# -eq 2 ] || usage
action=$1
dir=$(realpath -m "$2")
log() { echo "cluster.sh: $*" >&2; }

# Wait up to $1 seconds for the command that follows to succeed.
wait_for() {
    local seconds=$1
    shift
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.5
    done
}

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pidfile() {
    local file=$1 pid
    [ -s "$file" ] || return 0
    pid=$(cat "$file")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        if ! wait_for 20 bash -c "! kill -0 $pid"; then
            log "PID $pid ($file) ignored SIGTERM for 20 s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$file"
}

stop() {
    if [ -f "$dir/slurm.conf" ] && pid_alive "$dir/slurmctld.pid"; then
        # Jobs still running would outlive slurmd (their slurmstepd are its children).
        SLURM_CONF=$dir/slurm.conf timeout 10 scancel --full --user="$(id -un)" 2>/dev/null || true
    fi
    stop_pidfile "$dir/slurmd.pid"
    stop_pidfile "$dir/slurmctld.pid"
    stop_pidfile "$dir/munge/munged.pid"
    if [ "$(readlink /etc/slurm/slurm.conf 2>/dev/null)" = "$dir/slurm.conf" ]; then
        rm -f /etc/slurm/slurm.conf
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
    local missing=()
    for cmd in munged slurmctld slurmd sbatch squeue sinfo scontrol scancel; do
        command -v "$cmd" >/dev/null || missing+=("$cmd")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        log "not installed: ${missing[*]} (apt-get install slurmctld slurmd slurm-client munge)"
        exit 2
    fi
    if [ "$(id -u)" -ne 0 ]; then
        log "slurmd must run as root"
        exit 2
    fi
    if [ -e /etc/slurm/slurm.conf ] || [ -L /etc/slurm/slurm.conf ]; then
        log "/etc/slurm/slurm.conf exists: a SLURM cluster is already configured on this machine"
        exit 2
    fi
    mkdir -p "$dir"/{munge,state,spool,log}
    chmod 700 "$dir" "$dir/munge"

    # munge: a fresh key and a socket of our own, named in slurm.conf (AuthInfo).
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$dir/munge/munge.key"
    munged --force --socket="$dir/munge/socket" --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
        --seed-file="$dir/munge/seed"
    wait_for 10 test -S "$dir/munge/socket" || {
        log "munged did not start: $dir/log/munged.log"
        return 1
    }

    local node cpus mem_mb
    node=$(hostname -s)
    cpus=$(nproc)
    # Leave the OS some memory: SLURM refuses jobs that ask for more than RealMemory.
    mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
    cat >"$dir/slurm.conf" <<CONF
ClusterName=hieval
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
# Finished jobs stay visible to squeue for 5 minutes: the SLURM executor plugin reads their
# final state there when there is no accounting database.
MinJobAge=300
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
    mkdir -p /etc/slurm
    ln -s "$dir/slurm.conf" /etc/slurm/slurm.conf
    echo "export SLURM_CONF=$dir/slurm.conf" >"$dir/env"
    export SLURM_CONF=$dir/slurm.conf

    slurmctld -c -i
    wait_for 30 scontrol ping || {
        log "slurmctld did not answer within 30 s: $dir/log/slurmctld.log"
        return 1
    }
    slurmd -N "$node"
    wait_for 60 bash -c "sinfo --noheader --nodes=$node --format=%T | grep -qx idle" || {
        log "node $node not idle within 60 s ($(sinfo --noheader --format=%T 2>&1)):" \
            "$dir/log/slurmd.log"
        return 1
    }
    log "up: node $node, $cpus CPUs, $mem_mb MB, partition debug (SLURM_CONF=$SLURM_CONF)"
}

case $action in
start)
    if ! start; then
        stop
        exit 1
    fi
    ;;
stop) stop ;;
*) usage ;;
esac
