# Docker: run one command. $1 = timeout in seconds, $2 = the command. Output goes to a file (a
# background child keeping a pipe open can never hang the harness); afterwards every process
# except PID 1 is killed.
exec 2>/dev/null
o=$(mktemp /tmp/.swe-residual-out.XXXXXX 2>/dev/null) || o=/tmp/.swe-residual-out.$$
timeout -s KILL "$1" bash -c "$2" >"$o" 2>&1 </dev/null
rc=$?
kill -9 -1 2>/dev/null
# a bounded head and tail of the output (the same bounds as swe_residual/backends/sandbox.py)
size=$(stat -c %s "$o" 2>/dev/null || echo 0)
if [ "$size" -le 524288 ]; then
  cat "$o" 2>/dev/null
else
  head -c 65536 "$o"; printf '\n[... %s bytes of output cut ...]\n' "$((size - 524288))"; tail -c 458752 "$o"
fi
rm -f "$o"
exit $rc
