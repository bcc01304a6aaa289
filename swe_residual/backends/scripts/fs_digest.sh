# Docker, machine tasks: content digests of the paths listed (NUL-separated) in the file $1, for
# comparing two replays. One NUL-terminated record per path: type mode uid gid digest path, where
# the digest is the sha256 of a regular file, the target of a symlink, '-' otherwise.
while IFS= read -r -d '' p; do
  if [ -L "$p" ]; then t=l; h=$(readlink "$p" | sha256sum); h=${h%% *}
  elif [ -f "$p" ]; then t=f; h=$(sha256sum < "$p" 2>/dev/null); h=${h%% *}
  elif [ -d "$p" ]; then t=d; h=-
  elif [ -e "$p" ]; then t=o; h=-
  else printf 'x\t-\t-\t-\t-\t%s\0' "$p"; continue; fi
  printf '%s\t%s\t%s\t%s\0' "$t" "$(stat --printf='%a\t%u\t%g' "$p" 2>/dev/null)" "$h" "$p"
done < "$1"
exit 0
