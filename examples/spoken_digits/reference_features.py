#!/usr/bin/env python3
"""Spoken-digits example: an independent numpy reference for the C++ log-mel front end.

A dev-time tool (numpy only; nothing at build or test time runs it). It computes the features
that features.hpp specifies, written afresh with numpy's own pieces (np.fft.rfft, np.hamming,
np.interp for the triangles, the stdlib wave reader) rather than ported from features.cpp, and
stores them as text next to the audio; features_test.cpp compares the C++ result with them.

Regenerate the committed fixtures (from the repository root, with a python3 that has numpy):

    espeak-ng -v gmw/en-US+m3 -s 170 -p 45 -w examples/spoken_digits/testdata/seven_oh_two.wav \
        "seven oh two"
    python3 examples/spoken_digits/reference_features.py make-tone \
        examples/spoken_digits/testdata/tone_16k.wav
    for f in seven_oh_two tone_16k; do
        python3 examples/spoken_digits/reference_features.py features \
            examples/spoken_digits/testdata/$f.wav examples/spoken_digits/testdata/$f
    done

`features WAV PREFIX` writes PREFIX.logmel.txt (before normalisation) and PREFIX.features.txt
(after): a first line "frames bands", then one line of `bands` values per frame.
"""

import argparse
import wave

import numpy as np

WINDOW_MS = 25
HOP_MS = 10
BANDS = 40
LOG_FLOOR = 1e-6  # features.hpp: kLogFloor
VARIANCE_FLOOR = 1e-6  # features.hpp: kVarianceFloor
PCM16_SCALE = 32768.0  # 16-bit PCM to [-1, 1], as libsndfile reads it
# 7 significant digits: rounding below 1e-5 for values up to 100, a tenth of the test's tolerance.
VALUE_FORMAT = "%.7g"


def read_wav(path):
    """(samples as float64 in [-1, 1], sample rate) of a 16-bit mono PCM WAV file."""
    with wave.open(path, "rb") as w:
        if w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise SystemExit(f"{path}: expected 16-bit mono PCM")
        rate = w.getframerate()
        data = w.readframes(w.getnframes())
    return np.frombuffer(data, dtype="<i2").astype(np.float64) / PCM16_SCALE, rate


def samples_in(rate, ms):
    # Integer half-up rounding, as features.hpp specifies (np.round would round half to even).
    return (rate * ms + 500) // 1000


def mel_from_hz(hz):
    return 2595.0 * np.log10(1.0 + hz / 700.0)


def hz_from_mel(mel):
    return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)


def triangles(rate, fft_size):
    """(BANDS, fft_size // 2 + 1): each band is 0 at its outer corners, 1 at its centre."""
    corners = hz_from_mel(np.linspace(0.0, mel_from_hz(rate / 2.0), BANDS + 2))
    bin_hz = np.fft.rfftfreq(fft_size, d=1.0 / rate)
    return np.array([np.interp(bin_hz, corners[b:b + 3], [0.0, 1.0, 0.0], left=0.0, right=0.0)
                     for b in range(BANDS)])


def log_mel(samples, rate):
    """(frames, BANDS) natural-log mel energies, not normalised."""
    window = samples_in(rate, WINDOW_MS)
    hop = samples_in(rate, HOP_MS)
    fft_size = 1 << (window - 1).bit_length()
    frames = 1 + (len(samples) - window) // hop
    if frames < 1:
        raise SystemExit(f"{len(samples)} samples: shorter than one window")
    starts = hop * np.arange(frames)
    framed = samples[starts[:, None] + np.arange(window)[None, :]] * np.hamming(window)
    power = np.abs(np.fft.rfft(framed, n=fft_size, axis=1)) ** 2
    return np.log(np.maximum(power @ triangles(rate, fft_size).T, LOG_FLOOR))


def normalised(values):
    return (values - values.mean(axis=0)) / np.sqrt(values.var(axis=0) + VARIANCE_FLOOR)


def write_table(path, values):
    with open(path, "w") as out:
        out.write(f"{values.shape[0]} {values.shape[1]}\n")
        np.savetxt(out, values, fmt=VALUE_FORMAT)


def make_tone(path):
    """0.4 s at 16 kHz: 60 ms of exact silence (the log floor), then a harmonic chirp in noise.

    A second sample rate for the test, with a power-of-two FFT size other than espeak-ng's.
    """
    rate = 16000
    silence = int(0.06 * rate)
    t = np.arange(int(0.34 * rate)) / rate
    # Instantaneous frequency 150 -> 3500 Hz; 3 harmonics so several bands move at once.
    phase = 2.0 * np.pi * (150.0 * t + 0.5 * (3500.0 - 150.0) / t[-1] * t ** 2)
    signal = sum(np.sin(h * phase) / h for h in (1, 2, 3))
    signal *= np.hanning(len(t))
    signal += 0.01 * np.random.default_rng(0).standard_normal(len(t))
    signal = np.concatenate([np.zeros(silence), 0.5 * signal / np.max(np.abs(signal))])
    pcm = np.round(signal * (PCM16_SCALE - 1)).astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    features = sub.add_parser("features", help="write PREFIX.logmel.txt and PREFIX.features.txt")
    features.add_argument("wav")
    features.add_argument("prefix")
    tone = sub.add_parser("make-tone", help="write the synthetic 16 kHz fixture")
    tone.add_argument("wav")
    args = parser.parse_args()
    if args.command == "make-tone":
        make_tone(args.wav)
        return
    samples, rate = read_wav(args.wav)
    raw = log_mel(samples, rate)
    write_table(args.prefix + ".logmel.txt", raw)
    write_table(args.prefix + ".features.txt", normalised(raw))


if __name__ == "__main__":
    main()
