#!/usr/bin/env bash
# Start a single-host Slurm cluster with several *virtual* nodes on localhost:
# munged + one slurmctld + one slurmd per virtual node (slurmd -N <name>, each
# on its own port). Debian 12's slurm-wlm 22.05.8 accepts this (verified).
#
# Carried from the team's verified test-bed recipe (a copy, so a fresh clone needs nothing else).
# Usage:  bash scripts/slurm/slurm-up.sh            # then: export SLURM_CONF=$SLURM_TB_DIR/slurm.conf
#         source "$SLURM_TB_DIR/env.sh"    # (sets SLURM_CONF)
# Env knobs (defaults):
#   SLURM_TB_DIR=/tmp/slurm-testbed   state, spool, logs, pid files, slurm.conf
#   SLURM_TB_NODES=4                  number of virtual nodes (n1..nN)
#   SLURM_TB_CPUS=4                   CPUs advertised per virtual node (config_overrides)
#   SLURM_TB_MEM_MB=2048              RealMemory per virtual node
#   SLURM_TB_CTLD_PORT=6817           slurmctld port
#   SLURM_TB_SLURMD_PORT0=6821        first slurmd port (node i uses PORT0+i-1)
#   SLURM_TB_INSTALL=auto             auto|1|0: apt-get install slurm+munge if missing
#   SLURM_TB_LINK_ETC=0               1: also symlink /etc/slurm/slurm.conf -> ours
#   SLURM_TB_NETNS=0                  1: "real" multi-host mode: node1..nodeN each in its own
#                                     network namespace (netns-up.sh, 10.250.0.1x), slurmctld on
#                                     the host bridge 10.250.0.1; a node can be cut off with
#                                     `ip link set tb-node2 down` (Slurm marks it down*, NODE_FAIL)
#   SLURM_TB_SLURMD_TIMEOUT=30 (10 in netns mode)  seconds until an unreachable node is DOWN
#   SLURM_TB_NODE_SHM=0               1: each slurmd (hence every task on that virtual node) gets
#                                     a private mount namespace with its own empty tmpfs on
#                                     /dev/shm (size SLURM_TB_NODE_SHM_SIZE=2g): real node-local
#                                     RAM disk semantics for env-broadcast tests
# Node-local "disk" per virtual node: TmpFS=$SLURM_TB_DIR/tmp/<node> (scontrol show config).
# Needs root (slurmd runs jobs as the submitting user; here SlurmUser=root).
set -euo pipefail

TB=${SLURM_TB_DIR:-/tmp/slurm-testbed}
NODES=${SLURM_TB_NODES:-4}
CPUS=${SLURM_TB_CPUS:-4}
MEM=${SLURM_TB_MEM_MB:-2048}
CTLD_PORT=${SLURM_TB_CTLD_PORT:-6817}
PORT0=${SLURM_TB_SLURMD_PORT0:-6821}
INSTALL=${SLURM_TB_INSTALL:-auto}
NETNS=${SLURM_TB_NETNS:-0}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ "$NETNS" = 1 ]; then
  PREFIX=${NS_PREFIX:-node}; NODES=${SLURM_TB_NODES:-${NS_COUNT:-3}}; SUB=${NS_SUBNET:-10.250.0}
  SLURMD_TIMEOUT=${SLURM_TB_SLURMD_TIMEOUT:-10}
else
  PREFIX=n; SLURMD_TIMEOUT=${SLURM_TB_SLURMD_TIMEOUT:-30}
fi

t_start=$(date +%s.%N)
log() { echo "[slurm-up $(date +%T)] $*"; }

need_install=0
for b in slurmctld slurmd sinfo munged; do command -v "$b" >/dev/null 2>&1 || need_install=1; done
if [ "$INSTALL" = 1 ] || { [ "$INSTALL" = auto ] && [ "$need_install" = 1 ]; }; then
  log "installing slurm + munge with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge bc >/dev/null
fi
t_installed=$(date +%s.%N)

# ---- munge -------------------------------------------------------------
mkdir -p "$TB"
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  log "munged already running"
else
  if [ ! -s /etc/munge/munge.key ]; then
    log "creating /etc/munge/munge.key"
    mkdir -p /etc/munge
    if command -v mungekey >/dev/null 2>&1; then mungekey --create --force >/dev/null; else
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none; fi
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  fi
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
  chmod 755 /run/munge
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n | unmunge >/dev/null
  cp /run/munge/munged.pid "$TB/munged.started-by-testbed.pid"
  log "munged started (pid $(cat /run/munge/munged.pid))"
fi

# ---- refuse to start twice -------------------------------------------------
if [ -s "$TB/slurmctld.pid" ] && kill -0 "$(cat "$TB/slurmctld.pid")" 2>/dev/null; then
  echo "slurmctld already running (pid $(cat "$TB/slurmctld.pid")); run slurm-down.sh first" >&2
  exit 1
fi
rm -rf "$TB/state" "$TB/spool" "$TB/tmp"
mkdir -p "$TB/state" "$TB/log"

HOST=$(hostname -s)
if [ "$NODES" -gt 1 ]; then NODESPEC="${PREFIX}[1-${NODES}]"; PORTSPEC="[${PORT0}-$((PORT0 + NODES - 1))]";
else NODESPEC="${PREFIX}1"; PORTSPEC="${PORT0}"; fi
if [ "$NETNS" = 1 ]; then
  if ! ip netns list | grep -qw "${PREFIX}${NODES}"; then
    NS_COUNT=$NODES NS_PREFIX=$PREFIX NS_SUBNET=$SUB bash "$HERE/netns-up.sh"
  fi
  CTLD_ADDR=$SUB.1
  if [ "$NODES" -gt 1 ]; then ADDRSPEC="$SUB.[11-$((10 + NODES))]"; HOSTSPEC=$NODESPEC; else ADDRSPEC=$SUB.11; HOSTSPEC=${PREFIX}1; fi
  NODELINE="NodeName=${NODESPEC} NodeHostname=${HOSTSPEC} NodeAddr=${ADDRSPEC} Port=${PORT0} CPUs=${CPUS} RealMemory=${MEM} State=UNKNOWN"
else
  CTLD_ADDR=127.0.0.1
  NODELINE="NodeName=${NODESPEC} NodeHostname=${HOST} NodeAddr=127.0.0.1 Port=${PORTSPEC} CPUs=${CPUS} RealMemory=${MEM} State=UNKNOWN"
fi
for i in $(seq 1 "$NODES"); do mkdir -p "$TB/spool/${PREFIX}$i" "$TB/tmp/${PREFIX}$i"; done

cat > "$TB/slurm.conf" <<EOF
# generated by slurm-up.sh -- single host, $NODES virtual nodes (one slurmd each)
ClusterName=testbed
SlurmctldHost=${HOST}(${CTLD_ADDR})
SlurmctldPort=${CTLD_PORT}
SlurmdPort=${PORT0}
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$TB/state
SlurmdSpoolDir=$TB/spool/%n
# per-node TmpFS: srun --mpi=pmix puts spmix_appdir_* here; a shared /tmp makes the
# virtual nodes collide ("Cannot create client cli tmpdir ... File exists")
TmpFS=$TB/tmp/%n
SlurmctldPidFile=$TB/slurmctld.pid
SlurmdPidFile=$TB/slurmd-%n.pid
SlurmctldLogFile=$TB/log/slurmctld.log
SlurmdLogFile=$TB/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=${SLURMD_TIMEOUT}
InactiveLimit=0
MinJobAge=60
KillWait=5
Waittime=0
MailProg=/bin/true
${NODELINE}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
printf 'export SLURM_CONF=%s\n' "$TB/slurm.conf" > "$TB/env.sh"
export SLURM_CONF="$TB/slurm.conf"
if [ "${SLURM_TB_LINK_ETC:-0}" = 1 ]; then mkdir -p /etc/slurm; ln -sfn "$TB/slurm.conf" /etc/slurm/slurm.conf; fi

# ---- daemons ---------------------------------------------------------------
slurmctld                       # daemonizes; pid -> $TB/slurmctld.pid
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.1; done
for i in $(seq 1 "$NODES"); do   # each slurmd daemonizes
  node=${PREFIX}$i
  cmd=(slurmd -N "$node")
  if [ "${SLURM_TB_NODE_SHM:-0}" = 1 ]; then
    cmd=(unshare --mount --propagation private sh -c \
         "mount -t tmpfs -o size=${SLURM_TB_NODE_SHM_SIZE:-2g} tb-$node-shm /dev/shm && exec slurmd -N $node")
  fi
  if [ "$NETNS" = 1 ]; then
    # nsenter --net, not `ip netns exec`: the latter remounts /sys, hiding /sys/fs/cgroup,
    # and slurmd 22.05 then dies with "Unable to initialize cgroup plugin"
    cmd=(nsenter --net="/run/netns/$node" "${cmd[@]}")
  fi
  "${cmd[@]}"
done

ok=0
for _ in $(seq 300); do
  idle=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
  if [ "$idle" -ge "$NODES" ]; then ok=1; break; fi
  sleep 0.1
done
t_end=$(date +%s.%N)
sinfo
if [ "$ok" != 1 ]; then
  echo "slurm-up: nodes did not become idle; see $TB/log" >&2
  tail -5 "$TB"/log/*.log >&2 || true
  exit 1
fi
log "cluster up: $NODES nodes x $CPUS CPUs; install $(printf '%.1f' "$(echo "$t_installed - $t_start" | bc)") s, daemons $(printf '%.1f' "$(echo "$t_end - $t_installed" | bc)") s"
log "use: export SLURM_CONF=$TB/slurm.conf   (or: source $TB/env.sh)"
