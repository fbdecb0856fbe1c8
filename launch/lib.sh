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

warn() {
  printf 'warning: %s\n' "$*" >&2
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
# path under it: gs://my-bucket/corpus, not gs://my-bucket-2). A dry run may keep placeholders:
# it only prints, and note_placeholders names them.
PLACEHOLDERS=()
require_setting() {
  local name="$1" placeholder="$2"
  if [[ "${!name}" == "${placeholder}" || "${!name}" == "${placeholder}/"* ]]; then
    if [[ "${DRY_RUN}" != 1 ]]; then
      die "set ${name} (it is still '${placeholder}'): edit the top of $0, or run ${name}=... $0 ..."
    fi
    PLACEHOLDERS+=("${name}=${!name}")
  fi
}

# In a dry run, one comment line naming the settings require_setting found still at their
# placeholders, so that the printed commands are not mistaken for ready ones.
note_placeholders() {
  if [[ "${DRY_RUN}" == 1 && ${#PLACEHOLDERS[@]} -gt 0 ]]; then
    printf '# Placeholders, to set before a real run (which refuses them): %s\n' \
      "${PLACEHOLDERS[*]}"
  fi
}

# ---- TPU generations. From the Cloud TPU docs ("TPU software versions", "TPU regions and zones").

# The generation of an accelerator type: v4, v5e (which gcloud names v5litepod-N), v5p or v6e;
# nothing for the others.
tpu_family() {
  case "$1" in
    v4-*) printf 'v4' ;;
    v5litepod-*) printf 'v5e' ;;
    v5p-*) printf 'v5p' ;;
    v6e-*) printf 'v6e' ;;
  esac
}

# The runtime version (the VM's OS image) for JAX on a generation's TPUs.
family_runtime() {
  case "$1" in
    v4) printf 'tpu-ubuntu2204-base' ;;
    v5e) printf 'v2-alpha-tpuv5-lite' ;;
    v5p) printf 'v2-alpha-tpuv5' ;;
    v6e) printf 'v2-alpha-tpuv6e' ;;
  esac
}

# Zones that offer every slice of a generation, the launcher's default first (the docs add
# single-tenant and newer zones; any zone that has the type works).
family_zones() {
  case "$1" in
    v4) printf 'us-central2-b' ;;
    v5e) printf 'us-west4-a us-central1-a us-south1-a us-west1-c' ;;
    v5p) printf 'us-east5-a us-central1-a' ;;
    v6e) printf 'us-east5-b us-east5-a us-east1-d us-central1-b europe-west4-a' ;;
  esac
}

# Sets RUNTIME_VERSION and ZONE for ACCELERATOR_TYPE where they are empty, before anything runs:
# a runtime of another generation is refused (gcloud would refuse the VM), and a zone not known
# to offer the generation is warned about (the list may lag the docs).
choose_runtime_and_zone() {
  local family runtime zones other
  family="$(tpu_family "${ACCELERATOR_TYPE}")"
  if [[ -z "${family}" ]]; then
    if [[ "${ACCELERATOR_TYPE}" == v5e-* ]]; then
      die "ACCELERATOR_TYPE=${ACCELERATOR_TYPE}: gcloud names v5e slices v5litepod-N, e.g." \
        "ACCELERATOR_TYPE=v5litepod-${ACCELERATOR_TYPE#v5e-}"
    fi
    if [[ -z "${RUNTIME_VERSION}" || -z "${ZONE}" ]]; then
      die "ACCELERATOR_TYPE=${ACCELERATOR_TYPE}: the launcher knows the runtime and zones of" \
        "v4-N, v5litepod-N, v5p-N and v6e-N only; for another type set RUNTIME_VERSION and ZONE"
    fi
    return 0
  fi
  runtime="$(family_runtime "${family}")"
  zones="$(family_zones "${family}")"
  for other in v4 v5e v5p v6e; do
    if [[ "${other}" != "${family}" && "${RUNTIME_VERSION}" == "$(family_runtime "${other}")" ]]
    then
      die "RUNTIME_VERSION=${RUNTIME_VERSION} is ${other}'s runtime:" \
        "${ACCELERATOR_TYPE} (${family}) needs ${runtime}, in one of the zones ${zones};" \
        "leave RUNTIME_VERSION unset to get it"
    fi
  done
  RUNTIME_VERSION="${RUNTIME_VERSION:-${runtime}}"
  ZONE="${ZONE:-${zones%% *}}"
  if [[ " ${zones} " != *" ${ZONE} "* ]]; then
    warn "ZONE=${ZONE} is not among the zones known to offer ${family} (${zones}); gcloud" \
      "refuses a zone without ${ACCELERATOR_TYPE} (Cloud TPU docs: 'TPU regions and zones')"
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
      -*)
        printf 'unknown option: %s (the one option is --dry-run, anywhere on the line)\n\n' \
          "${command}" >&2
        usage 2 ;;
    esac
    if [[ "${known}" != *" ${command} "* ]]; then
      printf 'unknown command: %s\n\n' "${command}" >&2
      usage 2
    fi
  done
}

# Sets DRY_RUN=1 for a --dry-run anywhere on the line, and COMMANDS to the other words.
parse_arguments() {
  local arg
  COMMANDS=()
  for arg in "$@"; do
    if [[ "${arg}" == --dry-run ]]; then
      DRY_RUN=1
    else
      COMMANDS+=("${arg}")
    fi
  done
}

# What every launcher checks before it runs anything: the commands $2.. are among those it knows
# ($1), PROJECT is set, DATA_SOURCE is when the corpus is to be copied, and ACCELERATOR_TYPE has
# a runtime and a zone.
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
  choose_runtime_and_zone
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
