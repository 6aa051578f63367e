# bash completion for spindle, spindled and spindle-studio.
# Candidates come from the program's own --help (CLI11's "Subcommands:" and "Options:"
# sections) at completion time, so they always match the installed version.
_spindle_help_words() {
  # "$@" = the program and the subcommand path typed so far.
  "$@" --help 2>/dev/null | awk '
    /^Subcommands:/ { section = "sub"; next }
    /^Options:/     { section = "opt"; next }
    /^[^ ]/         { section = "" }
    section == "sub" && /^  [a-z]/ { print $1 }
    section == "opt" && /^  -/ {
      n = split($1, names, ",")
      for (i = 1; i <= n; i++) { w = names[i]; sub(/=.*/, "", w); print w }
    }'
}

_spindle() {
  local cur=${COMP_WORDS[COMP_CWORD]} i
  local -a cmd=("${COMP_WORDS[0]}")
  # The subcommand path so far: the words before the cursor that are not options or values.
  for ((i = 1; i < COMP_CWORD; i++)); do
    [[ ${COMP_WORDS[i]} == -* || ${COMP_WORDS[i-1]} == --* ]] || cmd+=("${COMP_WORDS[i]}")
  done
  mapfile -t COMPREPLY < <(compgen -W "$(_spindle_help_words "${cmd[@]}")" -- "$cur")
  if [[ ${#COMPREPLY[@]} -eq 0 ]]; then
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")  # a value: most are paths
  fi
}
complete -F _spindle spindle spindled spindle-studio
