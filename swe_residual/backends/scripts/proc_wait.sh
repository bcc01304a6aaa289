# Docker, machine tasks: wait until a restarted process runs (and listens where it did), then check
# that its ports answer. $1 = deadline in seconds, $2 = pid, then "address:port" entries. Prints
# "ok" or one line saying what is wrong; exit 0 either way (the harness reads the line).
limit=${1%.*}
deadline=$(( $(date +%s) + limit ))
pid=$2
shift 2
alive() { s=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1; s=${s##*) }; [ "${s%% *}" != Z ]; }
tree() {  # pid and its descendants
  local all="$pid" added=1
  while [ "$added" = 1 ]; do
    added=0
    for d in /proc/[0-9]*; do
      q=${d#/proc/}
      case " $all " in *" $q "*) continue;; esac
      s=$(cat "$d/stat" 2>/dev/null) || continue
      s=${s##*) }; set -- $s
      case " $all " in *" $2 "*) all="$all $q"; added=1;; esac
    done
  done
  echo "$all"
}
listening() {  # port -> is one of the tree's sockets listening on it?
  local hex inodes=""
  hex=$(printf '%04X' "$1")
  for q in $(tree); do
    for f in /proc/"$q"/fd/*; do
      l=$(readlink "$f" 2>/dev/null) || continue
      case $l in socket:\[*\]) i=${l#socket:[}; inodes="$inodes ${i%]} ";; esac
    done
  done
  while read -r _ local _ st _ _ _ _ _ inode _; do
    [ "$st" = 0A ] || continue
    [ "${local##*:}" = "$hex" ] || continue
    case "$inodes" in *" $inode "*) return 0;; esac
  done < <(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null)
  return 1
}
while :; do
  if ! alive; then echo "exited right after it was started"; exit 0; fi
  missing=""
  for a in "$@"; do listening "${a##*:}" || missing="$missing ${a##*:}"; done
  [ -z "$missing" ] && break
  if [ "$(date +%s)" -ge "$deadline" ]; then echo "runs, but does not listen on port(s)$missing after ${limit}s"; exit 0; fi
  sleep 0.1
done
sleep 0.3
alive || { echo "exited right after it was started"; exit 0; }
for a in "$@"; do
  host=${a%:*} port=${a##*:}
  (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null || { echo "port $port does not accept connections on $host"; exit 0; }
done
echo ok
