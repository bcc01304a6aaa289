# Docker: run one command with a report channel. $1 = timeout in seconds, $2 = the command, $3 =
# "kill" (afterwards kill every process but PID 1, as exec_wrapper.sh does) or "keep" (machine
# tasks: what runs is the machine's state), $4 = the most bytes the channel carries.
# The channel is a fifo, its path in $SWE_RESIDUAL_CHANNEL; a reader copies it, unbuffered, to this
# exec's own stdout, which the host reads as it comes: a line written there has left the
# container. Once the command ended, every other process is killed (kill mode) and the channel
# drained (at most 2 s: in keep mode a process that outlived the command may hold it open; then
# the reader is stopped), then the command's bounded output follows and last a trailer
# "swe-residual-channel <bytes of output>": the host splits the stream from its end, so nothing
# written to the channel can pass as output.
exec 2>/dev/null
o=$(mktemp /tmp/.swe-residual-out.XXXXXX 2>/dev/null) || o=/tmp/.swe-residual-out.$$
f="$o.channel"
rm -f "$o.drained" "$f"
if command -v stdbuf >/dev/null; then copy() { stdbuf -o0 head -c "$1"; }; else copy() { head -c "$1"; }; fi
# kill -9 the processes $2 selects: "reader" the reader ($1) and its copy (a child of it), "others"
# every other process but PID 1 and this script
stop() {
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    { [ "$pid" = 1 ] || [ "$pid" = $$ ]; } && continue
    read -r s <"$p/stat" 2>/dev/null || continue
    set -- "$1" "$2" ${s##*) }
    if [ "$pid" = "$1" ] || [ "$4" = "$1" ]; then mine=reader; else mine=others; fi
    [ "$mine" = "$2" ] && kill -9 "$pid"
  done
}
reader=
if mkfifo -m 666 "$f"; then
  exec 4>&1
  { copy "$4" <"$f" >&4; : >"$o.drained"; } &
  reader=$!
  exec 5<>"$f" 4>&-      # held open by this script until the command ended: no early end of file
  export SWE_RESIDUAL_CHANNEL="$f"
else
  : >"$o.drained"
fi
timeout -s KILL "$1" bash -c "$2" 5>&- >"$o" 2>&1 </dev/null
rc=$?
exec 5>&-
# first nothing but the reader is left (kill mode: what outlived the command writes no more), then
# the reader copies what the fifo still holds and ends
[ "$3" = kill ] && [ -n "$reader" ] && stop "$reader" others
for _ in $(seq 40); do [ -e "$o.drained" ] && break; sleep 0.05; done
if [ "$3" = kill ]; then
  kill -9 -1
elif [ ! -e "$o.drained" ] && [ -n "$reader" ]; then
  stop "$reader" reader
fi
rm -f "$f"
# a bounded head and tail of the output (the same bounds as swe_residual/backends/sandbox.py)
size=$(stat -c %s "$o" 2>/dev/null || echo 0)
if [ "$size" -le 524288 ]; then
  cat "$o" 2>/dev/null >"$o.shown"
else
  { head -c 65536 "$o"; printf '\n[... %s bytes of output cut ...]\n' "$((size - 524288))"; tail -c 458752 "$o"; } >"$o.shown"
fi
cat "$o.shown"
printf '\nswe-residual-channel %s\n' "$(stat -c %s "$o.shown" 2>/dev/null || echo 0)"
rm -f "$o" "$o.drained" "$o.shown"
exit $rc
