# Docker: the base commit of /app in a clean image and the untracked files the image ships
# ("<blob> <path>" lines, e.g. DeepSWE's older /app/pre_artifacts.sh).
g() { git -c safe.directory='*' -c core.quotepath=off "$@"; }
cd /app 2>/dev/null || { echo; exit 0; }
g rev-parse --verify -q HEAD || echo
g ls-files --others --exclude-standard 2>/dev/null | head -n 2000 > /tmp/.swe-residual-probe
if [ -s /tmp/.swe-residual-probe ]; then
  g hash-object --stdin-paths < /tmp/.swe-residual-probe | paste -d' ' - /tmp/.swe-residual-probe
fi
rm -f /tmp/.swe-residual-probe
