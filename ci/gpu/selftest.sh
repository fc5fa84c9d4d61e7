#!/usr/bin/env bash
# Checks check.sh's own counting, without a GPU and without Rust: a bundle of
# stand-in test binaries (shell scripts printing what the Rust test harness
# prints) whose results are known, run through `check.sh run` and `rerun`.
#
#   split     : 4 tests, 2 failed, one failure's "test ... FAILED" line split
#               by the test's own output (a regex on such lines misses it)
#   crash     : dies by a signal before its summary
#   quietfail : a passing summary but a non-zero exit status
#   gpu_bench : fails when given --check-goals (a missed goal)
#   compute-sanitizer : says the device is not supported (reported as skipped)
#
# and that the steps' time limits add up to at most 420 s.
#
# Usage: ci/gpu/selftest.sh     (exits non-zero, saying why, on a wrong count)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bundle=$work/bundle
mkdir -p "$bundle/tests" "$bundle/examples"
cp "$here/check.sh" "$bundle/check.sh"

# A stand-in test binary: `--exact NAME` runs one test (none when unknown).
stand_in() {
    local path=$1 body=$2
    cat > "$path" <<EOF
#!/usr/bin/env bash
if [ "\${1:-}" = --exact ]; then
    case \$2 in
        a|b|c|d|x|y|z) echo "running 1 test"; echo "test \$2 ... ok"; echo
                       echo "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 3 filtered out"; exit 0 ;;
        *) echo "running 0 tests"; echo
           echo "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 4 filtered out"; exit 0 ;;
    esac
fi
$body
EOF
    chmod +x "$path"
}

stand_in "$bundle/tests/split" '
echo "running 4 tests"
echo "test a ... ok"
echo "test b ... some output of test b"
echo "    indented output"
echo "FAILED"
echo "test c ... ok"
echo "test d ... FAILED"
echo
echo "failures:"
echo
echo "---- b stdout ----"
echo "    indented output"
echo
echo "failures:"
echo "    b"
echo "    d"
echo
echo "test result: FAILED. 2 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out"
exit 101'
stand_in "$bundle/tests/crash" '
echo "running 2 tests"
echo "test x ... ok"
kill -SEGV $$'
stand_in "$bundle/tests/quietfail" '
echo "running 3 tests"
echo "test x ... ok"; echo "test y ... ok"; echo "test z ... ok"
echo
echo "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out"
exit 1'
printf '#!/usr/bin/env bash\necho "gpu_kernel: ok"\n' > "$bundle/examples/gpu_kernel"
printf '#!/usr/bin/env bash\nfor a in "$@"; do [ "$a" = --check-goals ] && { echo "1 goal(s) missed"; exit 1; }; done\necho "goals not checked"\n' \
    > "$bundle/examples/gpu_bench"
chmod +x "$bundle/examples/"*

fail() { echo "gpu selftest: $*" >&2; exit 1; }
expect_lines() { # expect_lines FILE LINE...: FILE holds exactly these lines, in any order
    local file=$1
    shift
    diff <(sort "$file") <(printf '%s\n' "$@" | sort) > /dev/null ||
        fail "$(basename "$file") holds $(tr '\n' ' ' < "$file"); expected $*"
}

# The limits, with the time each step gets to stop, fit 420 s (LIMIT_INTEROP
# is each of the two kernel libraries' examples').
total=$(grep -E '^(LIMIT_[A-Z]+|KILL_AFTER)=' "$here/check.sh" |
    awk -F= '$1 == "KILL_AFTER" { kill = $2; next }
             { n = ($1 == "LIMIT_INTEROP") ? 2 : 1; sum += n * $2; steps += n }
             END { print sum + steps * kill }')
[ "$total" -le 420 ] || fail "the steps' time limits add up to $total s, over 420 s"

mkdir -p "$work/bin"
printf '#!/usr/bin/env bash
echo "========= Error: Device not supported"
exit 1
' > "$work/bin/compute-sanitizer"
chmod +x "$work/bin/compute-sanitizer"

report=$work/report.txt
status=0
PATH="$work/bin:$PATH" CHECK_ALLOW_NO_GPU=1 bash "$bundle/check.sh" run "$report" > /dev/null || status=$?
[ "$status" -ne 0 ] || fail "run exited 0 with failures"
tail -n 1 "$report" | grep -qx '6 passed, 5 failed' ||
    fail "run counted '$(tail -n 1 "$report")'; expected '6 passed, 5 failed'"
expect_lines "$report.failed" "split::b" "split::d" "crash::*" "quietfail::*" "example::gpu_bench"
grep -q '^memcheck gpu_kernel ... skipped' "$report" ||
    fail "an unsupported device under compute-sanitizer was not reported as skipped"

# The goals are not checked on the fake driver.
echo example::gpu_bench > "$work/bench"
status=0
CHECK_ALLOW_NO_GPU=1 CHECK_FAKE_DRIVER=1 bash "$bundle/check.sh" rerun "$work/again.txt" "$work/bench" \
    > /dev/null || status=$?
[ "$status" -eq 0 ] || fail "gpu_bench failed on the fake driver, where its goals are not checked"

# A rerun runs only what failed; a name that matches no test is a failure.
printf '%s\n' "split::b" "split::no_such_test" > "$work/list"
status=0
CHECK_ALLOW_NO_GPU=1 bash "$bundle/check.sh" rerun "$work/rerun.txt" "$work/list" > /dev/null || status=$?
[ "$status" -ne 0 ] || fail "rerun exited 0 although a named test matched nothing"
tail -n 1 "$work/rerun.txt" | grep -qx '1 passed, 1 failed' ||
    fail "rerun counted '$(tail -n 1 "$work/rerun.txt")'; expected '1 passed, 1 failed'"
expect_lines "$work/rerun.txt.failed" "split::no_such_test"
echo "gpu selftest: check.sh counts split, crashed and quietly failing runs, goals, an unsupported sanitizer and reruns right, within $total s of limits"
