# shellcheck shell=bash
# The case runner and collector of scripts/gpu-check.sh, sourced by it (not run on its own), and by
# tests/gpu_check_collector_test.sh, which runs them over a stand-in executable without a GPU or a
# build.
#
# The caller sets:
#   gpu_check_exe   the Catch2 executable whose cases run_case runs (one case name per process);
#   gpu_check_work  (optional) the folder for run_cases' scratch files [TMPDIR, else /tmp].
#
# What the collector guarantees, also when cases end at the same moment: a case is reported once
# it has written its result, and then exactly once; its exit status and seconds are read whole
# (never an empty or half-written status); its log is complete when it is read (the status is
# written after timeout has returned, so after the case's process ended; only a process the case
# left running in the background could still add to it); a case whose runner ended without
# writing a status is reported as failed with that reason instead of being lost or waited for
# forever.

# Catch2 test-spec characters in a name (",[]\"*~\\") are escaped so that the name matches itself.
escape_name() { printf '%s' "$1" | sed 's/[][\\,"*~]/\\&/g'; }

# A case in its own process: `run_case INDEX NAME LIMIT DIR [wrapper...]` writes DIR/INDEX.log
# (the case's output), then DIR/INDEX.rc ("exit-status seconds"); returns 0, or 1 when it could
# not write the status (never 127, which run_cases reads from `wait -n` as "no runner left").
run_case() {
    local index=$1 name=$2 limit=$3 dir=$4
    shift 4
    local t0=$SECONDS rc
    # shellcheck disable=SC2154  # gpu_check_exe: set by the caller (above)
    timeout -k 5 "$limit" "$@" "$gpu_check_exe" "$(escape_name "$name")" > "$dir/$index.log" 2>&1
    rc=$?
    # INDEX.rc is the mark the collector looks for, at any moment: a redirection creates its file
    # empty before anything is written into it, so the status is written under a name the
    # collector never reads and renamed into place (a rename is atomic): seen whole or not at all.
    if ! { printf '%d %d\n' "$rc" $((SECONDS - t0)) > "$dir/$index.rc.partial" &&
        mv -f "$dir/$index.rc.partial" "$dir/$index.rc"; }; then
        return 1
    fi
}

# exit status, log, seconds taken, time limit -> one word: passed, failed, crashed, timed_out,
# skipped, memcheck_errors (compute-sanitizer's --error-exitcode in scripts/gpu-check.sh).
classify() {
    local rc=$1 log=$2 seconds=${3:-0} limit=${4:-0}
    case "$rc" in
        '' | *[!0-9]*) echo failed ;;
        0) if grep -q "No test cases matched" "$log"; then echo failed; else echo passed; fi ;;
        77) echo skipped ;;
        99) if grep -q "ERROR SUMMARY" "$log"; then echo memcheck_errors; else echo failed; fi ;;
        124) echo timed_out ;;
        # timeout's -k sends SIGKILL only after the limit; a SIGKILL before it came from elsewhere
        # (the kernel's out-of-memory killer).
        137) if [ "$seconds" -ge "$limit" ]; then echo timed_out; else echo crashed; fi ;;
        *) if [ "$rc" -gt 128 ]; then echo crashed; else echo failed; fi ;;
    esac
}

# One finished case: prints its line and appends its row to TSV and its output to LOG (DETAIL,
# when given, replaces the one read from the case's output).
# report_case TSV LOG NAME RC SECONDS LIMIT CASE-LOG [DETAIL]
report_case() {
    local tsv=$1 log=$2 name=$3 rc=$4 seconds=$5 limit=$6 case_log=$7 given=${8:-}
    local status worst="" detail=""
    status="$(classify "$rc" "$case_log" "$seconds" "$limit")"
    if [ -f "$case_log" ]; then
        worst="$(grep -m1 '^worst-of-tolerance:' "$case_log" | cut -d: -f2- | sed 's/^ //')"
    fi
    case "$status" in
        failed | memcheck_errors)
            local line=""
            if [ -f "$case_log" ]; then
                line="$(grep -m1 -E 'FAILED|No test cases matched|threw|ERROR SUMMARY' "$case_log")"
                # Otherwise the last line says most (timeout's own "failed to run command").
                [ -n "$line" ] || line="$(sed '/^[[:space:]]*$/d' "$case_log" | tail -n 1)"
            fi
            detail="exit ${rc:-?}: $(printf '%s' "$line" | cut -c1-120)" ;;
        crashed)
            detail="signal $((rc - 128)) ($(kill -l $((rc - 128)) 2> /dev/null))"
            [ "$rc" -eq 137 ] && detail="$detail before its limit" ;;
        timed_out) detail="over its limit" ;;
        skipped) detail="$(grep -m1 -i 'skip' "$case_log" | cut -c1-100)" ;;
    esac
    [ -n "$given" ] && detail="$given"
    printf '%-9s %4ss  %s  [%s]\n' "$status" "$seconds" "$name" "${worst:-$detail}"
    [ -n "$worst" ] && [ -n "$detail" ] && echo "            $detail"
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$seconds" "$worst" "$detail" >> "$tsv"
    {
        echo "===== $name : $status (exit ${rc:-none}, $seconds s)"
        if [ -f "$case_log" ]; then cat "$case_log"; fi
    } >> "$log"
}

# Runs the named cases PARALLEL at a time until they end or the phase deadline (in $SECONDS)
# comes; prints a line per case as it ends and appends "name<TAB>status<TAB>seconds<TAB>worst<TAB>
# detail" rows to TSV (worst: the case's worst-of-tolerance line, "0.12 (label)") and each case's
# output to LOG. Cases never started for want of time are reported not_run.
# run_cases TSV LOG PHASE-DEADLINE PARALLEL CASE-LIMIT [wrapper...] < names
run_cases() {
    local tsv=$1 log=$2 phase_deadline=$3 width=$4 limit=$5
    shift 5
    local -a names=()
    mapfile -t names
    local dir
    dir="$(mktemp -d "${gpu_check_work:-${TMPDIR:-/tmp}}/cases.XXXXXX")" || return 1
    local next=0 running=0 done_count=0 total=${#names[@]}
    # Started and not yet reported: index -> "start-second limit".
    local -A started=()
    local i rc seconds t0 this_limit waited
    while [ "$done_count" -lt "$total" ]; do
        while [ "$running" -lt "$width" ] && [ "$next" -lt "$total" ] &&
              [ $((phase_deadline - SECONDS)) -gt 5 ]; do
            this_limit=$limit
            [ $((phase_deadline - SECONDS)) -lt "$this_limit" ] &&
                this_limit=$((phase_deadline - SECONDS))
            run_case "$next" "${names[$next]}" "$this_limit" "$dir" "$@" &
            started[$next]="$SECONDS $this_limit"
            next=$((next + 1))
            running=$((running + 1))
        done
        if [ "$running" -eq 0 ]; then break; fi
        # Returns when some case's runner has ended (perhaps one already reported: a status file
        # is renamed into place just before its runner exits), or 127 when none is left.
        wait -n
        waited=$?
        # Collect every case whose status has appeared: one wait may cover several ends, and
        # more may end during this scan (they are seen now or after the next wait).
        for i in "${!started[@]}"; do
            [ -f "$dir/$i.rc" ] || continue
            read -r rc seconds < "$dir/$i.rc"
            report_case "$tsv" "$log" "${names[$i]}" "$rc" "$seconds" "${started[$i]#* }" \
                "$dir/$i.log"
            rm -f "$dir/$i.rc" "$dir/$i.log"
            unset "started[$i]"
            running=$((running - 1))
            done_count=$((done_count + 1))
        done
        # No runner is left, so a started case without a status never gets one (its runner was
        # killed, or could not write the file): reported, not waited for.
        if [ "$waited" -eq 127 ]; then
            for i in "${!started[@]}"; do
                t0="${started[$i]% *}"
                report_case "$tsv" "$log" "${names[$i]}" "" $((SECONDS - t0)) \
                    "${started[$i]#* }" "$dir/$i.log" "its runner ended without an exit status"
                rm -f "$dir/$i.log" "$dir/$i.rc.partial"
                unset "started[$i]"
                running=$((running - 1))
                done_count=$((done_count + 1))
            done
        fi
    done
    for ((i = next; i < total; ++i)); do
        printf '%-9s %4ss  %s  [%s]\n' not_run 0 "${names[$i]}" "no time left in the phase"
        printf '%s\t%s\t%s\t\t%s\n' "${names[$i]}" not_run 0 "no time left in the phase" >> "$tsv"
    done
    rm -rf "$dir"
}
