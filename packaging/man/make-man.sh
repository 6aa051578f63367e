#!/usr/bin/env bash
# Writes OUT.1.gz, the man page of PROGRAM, from its own --help and --version (help2man). For
# the `spindle` CLI every subcommand's --help (and its subcommands') follows as a section, so
# the page documents the whole command tree.
# Usage: make-man.sh PROGRAM "one-line description" OUT
set -euo pipefail
prog=$1 desc=$2 out=$3
name=$(basename "$prog")
include=$(mktemp)
trap 'rm -f "$include"' EXIT
subcommands() {  # the names under "Subcommands:" of `"$@" --help`
  "$@" --help 2>/dev/null | awk '/^Subcommands:/{s=1;next} /^[^ ]/{s=0} s&&/^  [a-z]/{print $1}'
}
{
  echo "[SEE ALSO]"
  echo "spindle(1), spindled(1), spindle-reward-host(1), spindle-studio(1);"
  echo "/usr/share/doc/spindle/README.md"
  if [[ $name == spindle ]]; then
    echo "[COMMANDS]"
    while read -r sub; do
      paths=("$sub")
      while read -r leaf; do [[ -n $leaf ]] && paths+=("$sub $leaf"); done < <(subcommands "$prog" "$sub")
      for path in "${paths[@]}"; do
        echo ".SS \"$name $path\""
        echo ".nf"
        # shellcheck disable=SC2086  # $path is "sub" or "sub leaf": two words on purpose
        "$prog" $path --help 2>&1 | sed -e 's/\\/\\\\/g' -e 's/^\./\\\&./' -e "s|$prog|$name|g"
        echo ".fi"
      done
    done < <(subcommands "$prog")
  fi
} >"$include"
help2man --no-info --no-discard-stderr --name="$desc" --include="$include" \
  --output="${out%.gz}" "$prog"
sed -i "s|$(dirname "$prog")/||g" "${out%.gz}"  # build paths out of the usage lines
gzip -9n -f "${out%.gz}"
