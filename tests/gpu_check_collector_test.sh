#!/usr/bin/env bash
# The collector of scripts/gpu-check.sh (scripts/gpu_check_lib.sh) against cases that end at the
# same moment, without a GPU or a build: a stand-in for lstm_gpu_tests sleeps to a shared
# wall-clock boundary and ends as its case name says (passed, failed, skipped, no such case,
# killed by a signal, its own status 124, its runner killed before writing a status; also a case
# over a 1 s limit), and each runner is slowed between opening its status file and writing it
# (see collect). Every round checks that each case is reported exactly once, with a whole exit
# status and the status its ending implies; then the --quick path without a device (196 cases,
# all skipped, several rounds) and the summary's verdict on it.
#
#   bash tests/gpu_check_collector_test.sh [COLLECTOR]   (default: scripts/gpu_check_lib.sh)
#
# COLLECTOR: another copy of the collector to hold to the same checks. Exit 0: all held; 1: a
# check failed (what differed is printed); 77: a tool this needs is missing.

set -u -o pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
lib="${1:-$root/scripts/gpu_check_lib.sh}"
summary_py="$root/scripts/gpu_check_summary.py"
for tool in timeout mktemp sed grep awk cut; do
    if ! command -v "$tool" > /dev/null 2>&1; then
        echo "LSTM_TEST_SKIPPED: $tool not found"
        exit 77
    fi
done

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
failures=0
fail() {
    echo "FAILED: $*"
    failures=$((failures + 1))
}

# The stand-in executable. Its argument is the Catch2-escaped case name; it prints the name as it
# reads it back (so that the escaping is checked too) and ends as the name's last word says.
fake="$scratch/fake_gpu_tests"
cat > "$fake" << 'EOF'
#!/usr/bin/env bash
name="$(printf '%s' "$1" | sed 's/\\\(.\)/\1/g')"
# Sleep to the wall-clock slot after next, so that the cases started together end together.
slot_us=$((${FAKE_SLOT_MS:-40} * 1000))
now="${EPOCHREALTIME:-}"
now="${now//[^0-9]/}"
[ -n "$now" ] || now="$(date +%s%6N)"
wait_us=$(((now / slot_us + 2) * slot_us - now))
sleep "$(printf '%d.%06d' $((wait_us / 1000000)) $((wait_us % 1000000)))"
case "$name" in
    *" pass") echo "worst-of-tolerance: 0.25 (y)" ;;
    *" fail") echo "tests/gpu/x.cpp:1: FAILED:" ;;
    *" skip") echo "LSTM_TEST_SKIPPED: no CUDA device visible" ;;
    *" nomatch") echo "No test cases matched 'x'" ;;
esac
# After the lines the collector looks for (a skipped case's name has "skip" in it).
echo "name: $name"
case "$name" in
    *" fail") exit 1 ;;
    *" skip") exit 77 ;;
    *" own124") exit 124 ;;
    *" term") kill -TERM $$ ;;
    *" kill") kill -KILL $$ ;;
    *" slow") sleep 3 ;;
    # The runner (this process's grandparent: run_case's shell, above timeout) dies first.
    *" lost") read -r _ _ _ grandparent _ < "/proc/$PPID/stat"; kill -KILL "$grandparent" ;;
esac
exit 0
EOF
chmod +x "$fake"

# The status and detail each ending implies (the last word of a case's name), as awk code.
expectations='
    function expect(name) {
        ending = name; sub(/.* /, "", ending)
        status["pass"] = "passed"; detail["pass"] = ""
        status["fail"] = "failed"; detail["fail"] = "exit 1: tests/gpu/x.cpp:1: FAILED:"
        status["nomatch"] = "failed"
        detail["nomatch"] = "exit 0: No test cases matched '"'"'x'"'"'"
        status["lost"] = "failed"; detail["lost"] = "its runner ended without an exit status"
        status["skip"] = "skipped"; detail["skip"] = "LSTM_TEST_SKIPPED: no CUDA device visible"
        status["own124"] = "timed_out"; detail["own124"] = "over its limit"
        status["slow"] = "timed_out"; detail["slow"] = "over its limit"
        status["term"] = "crashed"; detail["term"] = "signal 15 (TERM)"
        status["kill"] = "crashed"; detail["kill"] = "signal 9 (KILL) before its limit"
        want_status = status[ending]; want_detail = detail[ending]
    }'

# collect RUN WIDTH LIMIT BOUND < names: runs the collector in a shell of its own into
# $scratch/RUN.{tsv,log,out}, for at most BOUND seconds (a collector that loses a case may wait
# for it forever). The runner's own printf and echo (run_case's status write) sleep 20 ms first,
# after the shell has opened the file they write to: a runner preempted at the worst moment, every
# time, so that a collector that can read a status before it is whole does so in every round.
collect() {
    local run=$1 width=$2 limit=$3 bound=$4
    rm -f "$scratch/$run".*
    # shellcheck disable=SC2016  # expanded by the inner shell
    timeout "$bound" bash -c '
        gpu_check_exe="$1"; gpu_check_work="$2"; source "$3" || exit 90
        slow() { if [ "${FUNCNAME[2]:-}" = run_case ]; then sleep 0.02; fi; }
        printf() { slow; builtin printf "$@"; }
        echo() { slow; builtin echo "$@"; }
        run_cases "$4" "$5" $((SECONDS + 3600)) "$6" "$7"' \
        collector "$fake" "$scratch" "$lib" "$scratch/$run.tsv" "$scratch/$run.log" \
        "$width" "$limit" > "$scratch/$run.out" 2>&1
    local rc=$?
    [ "$rc" -eq 124 ] && fail "$run: the collector did not end within $bound s"
    [ "$rc" -eq 90 ] && fail "$run: could not source $lib"
    touch "$scratch/$run.tsv" "$scratch/$run.log"
}

# check RUN NAMES-FILE: every case of NAMES-FILE reported exactly once, as its ending implies,
# with a whole exit status in its log header and its own output (the name it read) in the log.
check() {
    local run=$1 names=$2
    local tsv="$scratch/$run.tsv" log="$scratch/$run.log"
    if ! awk -F'\t' -v run="$run" "$expectations"'
        FILENAME == ARGV[1] { wanted[$0] = 1; order[++n] = $0; next }
        FILENAME == ARGV[2] {
            rows[$1]++; got_status[$1] = $2; got_seconds[$1] = $3; got_detail[$1] = $5
            if (!($1 in wanted)) { print "FAILED: " run ": a case never started: " $1; bad++ }
            next
        }
        /^===== / {
            if ($0 ~ /\(exit [0-9]+, [0-9]+ s\)$/) headers++
            else if ($0 !~ / lost : failed \(exit none, [0-9]+ s\)$/) {
                print "FAILED: " run ": a log header without a whole exit status: " $0; bad++
            }
        }
        /^name: / { echoed[substr($0, 7)]++ }
        END {
            for (i = 1; i <= n; ++i) {
                name = order[i]
                expect(name)
                if (rows[name] != 1) {
                    print "FAILED: " run ": reported " rows[name] + 0 " times: " name; bad++
                } else if (got_status[name] != want_status || got_detail[name] != want_detail ||
                           got_seconds[name] !~ /^[0-9]+$/) {
                    print "FAILED: " run ": " name ": got " got_status[name] " (" \
                        got_seconds[name] " s) [" got_detail[name] "], expected " want_status \
                        " [" want_detail "]"
                    bad++
                }
                if (echoed[name] != 1) {
                    print "FAILED: " run ": " name ": its own output is in the log " \
                        echoed[name] + 0 " times"
                    bad++
                }
                if (name !~ / lost$/) expected_headers++
            }
            if (headers != expected_headers) {
                print "FAILED: " run ": " headers + 0 " log headers with an exit status for " \
                    expected_headers " cases"; bad++
            }
            exit bad > 0
        }' "$names" "$tsv" "$log" > "$scratch/$run.check"; then
        head -n 20 "$scratch/$run.check"
        failures=$((failures + $(grep -c '^FAILED' "$scratch/$run.check")))
        echo "  $run: collector output (first lines):"
        head -n 8 "$scratch/$run.out" | sed 's/^/    /'
        return 1
    fi
}

# classify alone: SIGKILL is a time-out only after the limit.
(
    # shellcheck source=/dev/null  # the collector under test, named on the command line
    source "$lib" > /dev/null 2>&1
    : > "$scratch/empty.log"
    for args in "137 6 1 timed_out" "137 0 90 crashed" "124 90 90 timed_out" "139 0 90 crashed" \
        "77 0 90 skipped" "0 0 90 passed" "1 0 90 failed" "'' 0 90 failed"; do
        eval "set -- $args"
        got="$(classify "$1" "$scratch/empty.log" "$2" "$3" 2> /dev/null)"
        [ "$got" = "$4" ] ||
            echo "FAILED: classify exit '$1' after $2 s of $3: got '$got', expected '$4'"
    done
) > "$scratch/classify.out"
if [ -s "$scratch/classify.out" ]; then
    cat "$scratch/classify.out"
    failures=$((failures + $(wc -l < "$scratch/classify.out")))
fi

# 1. Every ending, eight at a time, ending together, round after round. Names carry Catch2's
#    test-spec characters.
endings=(pass fail skip nomatch own124 term kill skip pass fail skip skip)
: > "$scratch/names.mixed"
for ((i = 0; i < 48; ++i)); do
    printf 'gpu: stand-in %02d, cuda [f64] "q" *~\\ %s\n' "$i" "${endings[i % ${#endings[@]}]}" \
        >> "$scratch/names.mixed"
done
t0=$SECONDS
for round in 1 2 3; do
    collect "mixed$round" 8 90 60 < "$scratch/names.mixed"
    check "mixed$round" "$scratch/names.mixed" || break
done
echo "mixed endings: 3 rounds of 48 cases, 8 at a time ($((SECONDS - t0)) s)"

# 2. A case over its limit (1 s) and one whose runner dies before writing a status, beside
#    ordinary ones: each reported once, none waited for forever.
printf 'gpu: stand-in %s\n' "a slow" "b lost" "c pass" "d skip" > "$scratch/names.edge"
t0=$SECONDS
collect edge 4 1 20 < "$scratch/names.edge"
check edge "$scratch/names.edge"
echo "a case over its limit, a lost runner: ($((SECONDS - t0)) s)"

# 3. The --quick path without a device: 196 cases, all skipped, 8 at a time, ending together;
#    rounds while 4 s last (at least 1, at most 3; GPU_CHECK_COLLECTOR_ROUNDS=N: N rounds,
#    whatever they take); then the summary's verdicts.
: > "$scratch/names.quick"
for ((i = 0; i < 196; ++i)); do
    printf 'gpu: variant stand-in f64 matches the reference: shape %03d skip\n' "$i" \
        >> "$scratch/names.quick"
done
t0=$SECONDS
rounds=0
max_rounds="${GPU_CHECK_COLLECTOR_ROUNDS:-3}"
while [ "$rounds" -lt "$max_rounds" ] &&
      { [ -n "${GPU_CHECK_COLLECTOR_ROUNDS:-}" ] || [ $((SECONDS - t0)) -lt 4 ]; }; do
    rounds=$((rounds + 1))
    collect "quick$rounds" 8 90 60 < "$scratch/names.quick"
    check "quick$rounds" "$scratch/names.quick" || break
done
echo "no device, --quick: $rounds rounds of 196 cases, 8 at a time ($((SECONDS - t0)) s)"

if command -v python3 > /dev/null 2>&1; then
    # summary ARGS... -> "exit-status last-line"
    summary() {
        local out
        out="$(python3 "$summary_py" --out "$scratch/sum" --phases "$scratch/sum/phases.tsv" \
            --info "$scratch/sum/info.txt" "$@")"
        echo "$? $(echo "$out" | tail -n 1)"
    }
    mkdir -p "$scratch/sum"
    printf 'tests\t10\t196 skipped\n' > "$scratch/sum/phases.tsv"
    echo "GPU: none" > "$scratch/sum/info.txt"
    cp "$scratch/quick1.tsv" "$scratch/sum/cases.tsv"
    got="$(summary --rehearsal)"
    case "$got" in "0 gpu-check: REHEARSAL PASSED"*) ;; *)
        fail "summary --rehearsal of 196 skipped cases: got '$got'" ;; esac
    got="$(summary)"
    case "$got" in "1 gpu-check: NOT VERIFIED"*) ;; *)
        fail "summary of 196 skipped cases on a device run: got '$got'" ;; esac
    cp "$scratch/mixed1.tsv" "$scratch/sum/cases.tsv"
    got="$(summary --rehearsal)"
    case "$got" in "1 gpu-check: FAILED"*) ;; *)
        fail "summary --rehearsal of failed cases: got '$got'" ;; esac
else
    echo "python3 not found: the summary's verdicts are not checked"
fi

if [ "$failures" -ne 0 ]; then
    echo "gpu_check_collector: $failures checks failed"
    exit 1
fi
echo "gpu_check_collector: all checks held"
