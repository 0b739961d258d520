#!/usr/bin/env bash
# make_data.sh: speaks the spoken-digits data set with espeak-ng (offline, no Python).
#
# Usage: make_data.sh OUT_DIR [--seed S] [--count N]      (defaults: --seed 1 --count 4000)
#        S from 0 to 4294967295, N from 1 to 1000000, both decimal (leading zeros allowed);
#        a bad argument exits 2, --help prints the usage.
#
# Writes N utterances as 16-bit mono WAV files at espeak-ng's native rate (22050 Hz; the feature
# code reads each file's own rate, so nothing is resampled) under OUT_DIR/wav/, and
# OUT_DIR/manifest.tsv with a header line and one row per utterance:
#
#   path     relative to OUT_DIR, e.g. wav/train/00000.wav
#   split    train | heldout
#   labels   space-separated class ids: 0..9 for "zero".."nine", 10 for "oh" (11 classes)
#   words    what was spoken, e.g. "three oh seven"
#   voice    espeak-ng voice file (accent), e.g. gmw/en-GB-x-rp
#   variant  espeak-ng variant (timbre), e.g. m3
#   speed    words per minute (-s)
#   pitch    0..99 (-p)
#   gap      extra pause between words, in 10 ms units (-g)
#
# Every 5th utterance (index % 5 == 4) is held out; the rest train. Within a split, utterances
# alternate between an isolated digit (cycling through the 11 classes, so classes are balanced)
# and a connected string of 3 to 7 random digits.
#
# Speakers: a "speaker" is a (voice, variant) pair. The held-out split uses only pairs that have
# a held-out voice OR a held-out variant; training uses only training voices with training
# variants. So the two splits share no pair, no held-out accent is heard in training and no
# held-out timbre is heard in training: held-out accuracy measures unseen speakers.
#
# Files of an earlier, larger run into the same OUT_DIR stay on disk but are not in the new
# manifest, which is always the whole truth.
#
# Reproducible: every random choice comes from a 32-bit LCG seeded with --seed (bash's own
# RANDOM changed its generator between bash versions, so it is not used), and espeak-ng's output
# is deterministic for fixed text and parameters.
set -euo pipefail

usage() {
    echo "usage: $0 OUT_DIR [--seed S] [--count N]      (defaults: --seed 1 --count 4000)"
}
fail() {
    echo "make_data.sh: $1" >&2
    exit "${2:-1}"
}
# Sets REPLY to $2 read as a decimal integer in [$3, $4], or fails naming option $1. Bash
# arithmetic would read a leading 0 as octal (010 is 8, 09 an error) and wrap past 2^63, so the
# digits are checked as text first: leading zeros, then at most 10 digits, read in base 10.
decimal_in() {
    if [[ $2 =~ ^0*([0-9]{1,10})$ ]] && (( 10#${BASH_REMATCH[1]} >= $3 )) &&
        (( 10#${BASH_REMATCH[1]} <= $4 )); then
        REPLY=$(( 10#${BASH_REMATCH[1]} ))
        return
    fi
    fail "$1 must be an integer from $3 to $4, got '$2'" 2
}

for arg in "$@"; do
    if [ "$arg" = --help ] || [ "$arg" = -h ]; then
        usage
        exit 0
    fi
done
[ $# -ge 1 ] || { usage >&2; exit 2; }
out_dir=$1
shift
# An option in OUT_DIR's place ("make_data.sh --seed 3 /tmp/x") would become a directory, and
# an empty OUT_DIR would put wav/ at the file system's root.
case $out_dir in
    '') fail "OUT_DIR must not be empty" 2 ;;
    -*) fail "OUT_DIR must not start with '-', got '$out_dir' (write ./$out_dir for one)" 2 ;;
esac
seed=1
count=4000
while [ $# -gt 0 ]; do
    case $1 in
        --seed) [ $# -ge 2 ] || fail "--seed needs a value" 2; seed=$2; shift 2 ;;
        --count) [ $# -ge 2 ] || fail "--count needs a value" 2; count=$2; shift 2 ;;
        *) fail "unknown argument '$1' ($(usage))" 2 ;;
    esac
done
# The seed feeds a 32-bit generator: a larger one would wrap onto a smaller one's data. A million
# utterances is far beyond any use here (the default set has 4000, about a minute of espeak-ng).
decimal_in --seed "$seed" 0 4294967295
seed=$REPLY
decimal_in --count "$count" 1 1000000
count=$REPLY
command -v espeak-ng >/dev/null ||
    fail "espeak-ng not found (install it with scripts/install-deps.sh)"

# Voices are given by their file under espeak-ng-data/voices/: the language names (en-gb, ...)
# silently ignore a +variant suffix in espeak-ng 1.51, the file names do not. en-US-nyc is left
# out: in 1.51 it speaks the digits exactly like en-US.
train_voices=(gmw/en gmw/en-US gmw/en-GB-x-rp gmw/en-GB-scotland gmw/en-029)
heldout_voices=(gmw/en-GB-x-gbclan gmw/en-GB-x-gbcwmd)
# Variants change the timbre (formants, breathiness, synthesiser). whisper is not used: with no
# voicing it is a different task, not a different speaker.
train_variants=(m1 m2 m4 m5 m6 m7 f1 f3 f4 croak klatt klatt2)
heldout_variants=(m3 m8 f2 f5 klatt3)

train_pairs=()
for v in "${train_voices[@]}"; do
    for w in "${train_variants[@]}"; do train_pairs+=("$v+$w"); done
done
heldout_pairs=()
for v in "${train_voices[@]}" "${heldout_voices[@]}"; do
    for w in "${train_variants[@]}" "${heldout_variants[@]}"; do
        is_train=0
        for p in "${train_pairs[@]}"; do [ "$p" = "$v+$w" ] && is_train=1; done
        [ $is_train -eq 0 ] && heldout_pairs+=("$v+$w")
    done
done

words=(zero one two three four five six seven eight nine oh)
num_classes=${#words[@]}

# Parameter ranges around espeak-ng's defaults (175 wpm, pitch 50), kept where speech stays
# natural-sounding.
min_speed=130 max_speed=210
min_pitch=30 max_pitch=70
max_gap=2                # connected strings only; isolated digits have no word gap
min_digits=3 max_digits=7
heldout_every=5

# Numerical Recipes' 32-bit LCG. random_below N sets REPLY to a value in [0, N) taken from the
# state's top 16 bits (an LCG's low bits are weak); the modulo bias is below N / 65536, i.e.
# under 0.1% for the ranges used here. No subshells, so the state carries over.
lcg_state=$seed
random_below() {
    lcg_state=$(( (1664525 * lcg_state + 1013904223) & 0xFFFFFFFF ))
    REPLY=$(( (lcg_state >> 16) % $1 ))
}
random_between() {  # inclusive
    random_below $(( $2 - $1 + 1 ))
    REPLY=$(( $1 + REPLY ))
}

mkdir -p -- "$out_dir/wav/train" "$out_dir/wav/heldout"
manifest_tmp="$out_dir/manifest.tsv.tmp"
printf 'path\tsplit\tlabels\twords\tvoice\tvariant\tspeed\tpitch\tgap\n' >"$manifest_tmp"

declare -A split_index=([train]=0 [heldout]=0)
for (( i = 0; i < count; i++ )); do
    if (( i % heldout_every == heldout_every - 1 )); then
        split=heldout
        random_below ${#heldout_pairs[@]}
        pair=${heldout_pairs[$REPLY]}
    else
        split=train
        random_below ${#train_pairs[@]}
        pair=${train_pairs[$REPLY]}
    fi
    k=${split_index[$split]}
    split_index[$split]=$(( k + 1 ))

    labels=()
    if (( k % 2 == 0 )); then
        labels=($(( (k / 2) % num_classes )))
        gap=0
    else
        random_between $min_digits $max_digits
        n=$REPLY
        for (( d = 0; d < n; d++ )); do
            random_below "$num_classes"
            labels+=("$REPLY")
        done
        random_between 0 $max_gap
        gap=$REPLY
    fi
    text=""
    for l in "${labels[@]}"; do text+="${text:+ }${words[$l]}"; done
    random_between $min_speed $max_speed
    speed=$REPLY
    random_between $min_pitch $max_pitch
    pitch=$REPLY

    rel=$(printf 'wav/%s/%05d.wav' "$split" "$i")
    espeak-ng -v "$pair" -s "$speed" -p "$pitch" -g "$gap" -w "$out_dir/$rel" "$text"
    [ -s "$out_dir/$rel" ] || fail "espeak-ng wrote nothing for '$text' ($pair)"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rel" "$split" "${labels[*]}" "$text" \
        "${pair%+*}" "${pair#*+}" "$speed" "$pitch" "$gap" >>"$manifest_tmp"
done
# Renamed only when complete, so a manifest never lists files that were not written.
mv -- "$manifest_tmp" "$out_dir/manifest.tsv"
echo "make_data.sh: $count utterances (${split_index[train]} train," \
    "${split_index[heldout]} heldout) in $out_dir"
