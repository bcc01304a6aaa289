# Apply a binary-safe patch ($SWE_PATCH: a Residual State, or an agent's final patch on a fresh
# instance) to the working tree of $SWE_APP without committing, then check HEAD is still the base
# commit ($SWE_BASE), so git log equals the clean history. Runs only on fresh clean instances.
g() { git -c safe.directory='*' -c core.quotepath=off "$@"; }
cd "${SWE_APP:-/app}" || exit 3
g apply --binary --whitespace=nowarn "$SWE_PATCH" 2>&1
rc=$?
rm -f "$SWE_PATCH"
[ "$rc" -eq 0 ] || exit "$rc"
if [ -n "${SWE_BASE:-}" ]; then
  head=$(g rev-parse HEAD)
  [ "$head" = "$SWE_BASE" ] || { echo "HEAD moved while applying the patch ($head != $SWE_BASE)"; exit 5; }
fi
