# shellcheck shell=bash
# Functions shared by launch/tpu_vm.sh and launch/tpu_pod.sh. Sourced, not run.
#
# Every command that touches Google Cloud goes through `run`, which only prints it when
# DRY_RUN=1. Dry-run output is therefore a shell script: the exact commands, with a `#` line
# before each step saying what it does.
#
# Written for bash 3.2 as well (the bash of macOS): no associative arrays, no mapfile.

# Says what the next step does: a `# ...` line in dry-run output, a `==> ...` line otherwise.
step() {
  if [[ "${DRY_RUN}" == 1 ]]; then
    printf '\n# %s\n' "$*"
  else
    printf '\n==> %s\n' "$*" >&2
  fi
}

die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

# Wraps one argument in single quotes for a shell: a'b becomes 'a'\''b'.
single_quote() {
  local escaped=${1//\'/\'\\\'\'}
  printf "'%s'" "${escaped}"
}

# Quotes one argument for a shell only where needed, so that printed commands stay readable:
# a plain word is left alone, and `--flag=value with spaces` becomes `--flag='value with spaces'`.
quote_arg() {
  local arg="$1"
  if [[ "${arg}" =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then
    printf '%s' "${arg}"
  elif [[ "${arg}" =~ ^(--[A-Za-z0-9_.-]+=)(.*)$ ]]; then
    printf '%s%s' "${BASH_REMATCH[1]}" "$(single_quote "${BASH_REMATCH[2]}")"
  else
    single_quote "${arg}"
  fi
}

# Prints a command, quoted so that it can be pasted into a shell.
print_command() {
  local line="" arg
  for arg in "$@"; do
    line+=" $(quote_arg "${arg}")"
  done
  printf '%s\n' "${line# }"
}

# Runs a command, after printing it; when DRY_RUN=1 it is only printed.
run() {
  print_command "$@"
  if [[ "${DRY_RUN}" != 1 ]]; then
    "$@"
  fi
}

# Joins arguments into one command line for the shell of a TPU VM (the --command of
# `gcloud compute tpus tpu-vm ssh`). Arguments that need quoting are double-quoted there, so the
# line still reads well inside the single quotes that print_command puts around it. An argument
# holding a character that is special inside double quotes is single-quoted instead.
remote_command() {
  local line="" arg
  for arg in "$@"; do
    if [[ "${arg}" =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then
      line+=" ${arg}"
    elif [[ "${arg}" == *[\"\$\`\\!]* ]]; then
      line+=" $(single_quote "${arg}")"
    elif [[ "${arg}" =~ ^(--[A-Za-z0-9_.-]+=)(.*)$ ]]; then
      line+=" ${BASH_REMATCH[1]}\"${BASH_REMATCH[2]}\""
    else
      line+=" \"${arg}\""
    fi
  done
  printf '%s' "${line# }"
}

# Sets the caller's `environment` to the `env NAME=VALUE ...` prefix that hands the training
# processes each variable TRAIN_ENV names and this shell sets (non-empty), and names them in
# ELECTRA_TRAIN_ENV, which remote_train.sh passes into its tmux session. Nothing when none is
# set, so that the usual command reads as before. check_launch has checked the names.
train_environment() {
  local names=() name given=()
  read -r -a names <<< "${TRAIN_ENV:-}" || true
  for name in ${names[@]+"${names[@]}"}; do
    if [[ -n "${!name:-}" ]]; then
      environment+=("${name}=${!name}")
      given+=("${name}")
    fi
  done
  if [[ ${#given[@]} -gt 0 ]]; then
    environment=(env "${environment[@]}" "ELECTRA_TRAIN_ENV=${given[*]}")
  fi
}

# The command that starts pretraining in the tmux session 'electra' of a TPU host, with the
# launcher's CONFIG, TRAIN_FILES, EVAL_FILES and EXTRA_FLAGS, writing to the workdir $1.
remote_train_command() {
  local flags=(--config="${REMOTE_CODE}/configs/${CONFIG}.py" --workdir="$1"
               --config.data.train_files="${TRAIN_FILES}")
  if [[ -n "${EVAL_FILES}" ]]; then
    flags+=(--config.data.eval_files="${EVAL_FILES}")
  fi
  local extra=()
  read -r -a extra <<< "${EXTRA_FLAGS}" || true
  local environment=()
  train_environment
  remote_command ${environment[@]+"${environment[@]}"} bash \
    "${REMOTE_CODE}/launch/remote_train.sh" start "${REMOTE_LOG}" "${flags[@]}" \
    ${extra[@]+"${extra[@]}"}
}

# Refuses to touch Google Cloud while the setting named $1 still holds the placeholder $2 (or a
# value built from it). A dry run may keep placeholders: it only prints.
require_setting() {
  local name="$1" placeholder="$2"
  if [[ "${DRY_RUN}" != 1 && "${!name}" == *"${placeholder}"* ]]; then
    die "set ${name} (it is still '${placeholder}'): edit the top of $0, or run ${name}=... $0 ..."
  fi
}

# Packs this checkout's source tree as git sees it (tracked files, and untracked files that are
# not ignored, so runs/, .venv/ and .git/ stay behind) into the tarball $1.
pack_source() {
  local tarball="$1" repo_root
  repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  step "Pack the source tree of ${repo_root} into ${tarball}"
  if [[ "${DRY_RUN}" == 1 ]]; then
    printf '%s \\\n  | %s\n' \
      "$(print_command git -C "${repo_root}" ls-files -z --cached --others --exclude-standard)" \
      "$(print_command tar -czf "${tarball}" -C "${repo_root}" --null -T -)"
  else
    git -C "${repo_root}" ls-files -z --cached --others --exclude-standard \
      | tar -czf "${tarball}" -C "${repo_root}" --null -T -
  fi
}

# Prints the comment at the top of the script that was run ($0): to stdout when asked for, to
# stderr after a mistake.
usage() {
  local status="${1:-0}"
  if [[ "${status}" != 0 ]]; then
    exec 1>&2
  fi
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
  exit "${status}"
}

# Checks every command word ($2...) against the script's commands ($1, space-separated) before
# any runs, so a typo in the last word does not leave a half-done sequence; help prints usage.
check_commands() {
  local known=" $1 " command
  shift
  if [[ $# == 0 ]]; then
    usage 2
  fi
  for command in "$@"; do
    case "${command}" in
      -h|--help|help) usage 0 ;;
    esac
    if [[ "${known}" != *" ${command} "* ]]; then
      printf 'unknown command: %s\n\n' "${command}" >&2
      usage 2
    fi
  done
}

# What every launcher checks before it runs anything: the commands $2.. are among those it knows
# ($1), PROJECT is set, and DATA_SOURCE is when the corpus is to be copied.
check_launch() {
  local known=$1
  shift
  check_commands "${known}" "$@"
  require_setting PROJECT my-gcp-project
  if [[ " $* " == *" data "* ]]; then
    require_setting DATA_SOURCE gs://my-bucket
  fi
  local names=() name
  read -r -a names <<< "${TRAIN_ENV:-}" || true
  for name in ${names[@]+"${names[@]}"}; do
    if ! [[ "${name}" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
      die "TRAIN_ENV='${TRAIN_ENV}': '${name}' is not a variable name; list the names of the" \
        "variables to pass, e.g. TRAIN_ENV='LIBTPU_INIT_ARGS TPU_STDERR_LOG_LEVEL'"
    fi
  done
}

# Runs the launcher's commands in the order given (each is a function of the launcher; three
# have other names, because bash (wait, export) or the system (ssh) already uses theirs).
run_commands() {
  local command
  for command in "$@"; do
    case "${command}" in
      wait) wait_active ;;
      export) export_hf ;;
      ssh) open_shell ;;
      *) "${command}" ;;
    esac
  done
}
