# Docker, machine tasks: start one recorded process again (a portable restore). Arguments: cwd,
# stdout file ('' = /dev/null), stderr file ('' = /dev/null, '-' = where stdout goes), the number
# N of environment entries, those N NAME=VALUE entries, then the command line. The process runs
# detached with exactly the recorded environment; its pid is printed.
cwd=$1 out=$2 err=$3 n=$4
shift 4
envs=("${@:1:$n}")
shift "$n"
(
  cd "$cwd" 2>/dev/null || cd / || exit 97
  exec </dev/null
  if [ -n "$out" ]; then { exec >>"$out"; } 2>/dev/null || exec >/dev/null; else exec >/dev/null; fi
  if [ "$err" = "-" ]; then exec 2>&1
  elif [ -n "$err" ]; then { exec 2>>"$err"; } 2>/dev/null || exec 2>/dev/null
  else exec 2>/dev/null; fi
  exec env -i "${envs[@]}" "$@"
) &
echo "$!"
