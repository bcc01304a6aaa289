# Docker, machine tasks: the processes running in the container, for a portable snapshot. Run as
# root. One line per process, tab-separated; text fields are base64 (they may hold anything) and
# bounded: P pid ppid uid gid starttime state session comm cmdline cwd environ fd0 fd1 fd2 socket-inodes
# Then the kernel's TCP tables (T4/T6 lines) so the host can tell which sockets listen on which port.
me=$$
n=0
b64() { head -c 16384 "$1" 2>/dev/null | base64 -w0; }
link() { printf %s "$(readlink "$1" 2>/dev/null)" | base64 -w0; }
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = "$me" ] && continue
  stat=$(cat "$d/stat" 2>/dev/null) || continue
  rest=${stat##*) }
  # shellcheck disable=SC2086
  set -- $rest
  state=$1 ppid=$2 sid=$4 start=${20}
  [ "$ppid" = "$me" ] && continue
  n=$((n + 1)); [ "$n" -gt 512 ] && break
  uid=$(awk '/^Uid:/ {print $2}' "$d/status" 2>/dev/null)
  gid=$(awk '/^Gid:/ {print $2}' "$d/status" 2>/dev/null)
  socks=""
  for f in "$d"/fd/*; do
    l=$(readlink "$f" 2>/dev/null) || continue
    case $l in socket:\[*\]) i=${l#socket:[}; socks="$socks${i%]},";; esac
  done
  printf 'P\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$p" "$ppid" "${uid:-0}" "${gid:-0}" \
    "$start" "$state" "$sid" "$(b64 "$d/comm")" "$(b64 "$d/cmdline")" "$(link "$d/cwd")" \
    "$(b64 "$d/environ")" "$(link "$d/fd/0")" "$(link "$d/fd/1")" "$(link "$d/fd/2")" "${socks:--}"
done
while read -r line; do printf 'T4\t%s\n' "$line"; done < /proc/net/tcp 2>/dev/null
while read -r line; do printf 'T6\t%s\n' "$line"; done < /proc/net/tcp6 2>/dev/null
exit 0
