// Spoken-digits example: tests of the log-mel front end (features.hpp), run by ctest as
// spoken_digits.* (one test per TEST_CASE). The main check compares the C++ features of the
// committed fixtures in testdata/ with the numpy reference stored next to them
// (reference_features.py wrote it; no Python runs at test time). SPOKEN_DIGITS_TESTDATA is the
// fixtures' folder, set by CMake.

#define CATCH_CONFIG_MAIN
#include "features.hpp"

#include <sndfile.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "lstm/error.hpp"

namespace {

using spoken_digits::Features;

const std::string kTestdata = SPOKEN_DIGITS_TESTDATA;

// The stored reference: first line "frames bands", then the values row by row.
Features read_table(const std::string& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    Features f;
    in >> f.frames >> f.bands;
    REQUIRE(in.good());
    f.values.resize(static_cast<size_t>(f.frames * f.bands));
    for (float& v : f.values) in >> v;
    REQUIRE(!in.fail());
    return f;
}

// Largest |a - b| over all values; the shapes must match exactly.
double max_difference(const Features& a, const Features& b) {
    REQUIRE(a.frames == b.frames);
    REQUIRE(a.bands == b.bands);
    REQUIRE(a.values.size() == b.values.size());
    double worst = 0.0;
    for (size_t i = 0; i < a.values.size(); ++i) {
        worst = std::max(worst, std::abs(double{a.values[i]} - double{b.values[i]}));
    }
    return worst;
}

// A folder of this process's own under the system's temporary folder, removed at exit, so
// concurrent runs (two build trees) do not write over each other's files.
const std::filesystem::path& scratch() {
    struct Folder {
        std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("spoken_digits_test_" + std::to_string(getpid()));
        Folder() { std::filesystem::create_directories(path); }
        ~Folder() {
            std::error_code ignored;
            std::filesystem::remove_all(path, ignored);
        }
    };
    static const Folder folder;
    return folder.path;
}

// Writes `frames` frames of `channels` channels of a 0.25-amplitude square wave as a 16-bit WAV.
std::string write_wav(const std::string& name, int channels, int64_t frames, int rate) {
    const std::string path = (scratch() / name).string();
    SF_INFO info{};
    info.samplerate = rate;
    info.channels = channels;
    info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
    SNDFILE* file = sf_open(path.c_str(), SFM_WRITE, &info);
    REQUIRE(file != nullptr);
    std::vector<float> samples(static_cast<size_t>(frames * channels));
    for (size_t i = 0; i < samples.size(); ++i) samples[i] = (i / 16) % 2 ? 0.25f : -0.25f;
    REQUIRE(sf_writef_float(file, samples.data(), frames) == frames);
    sf_close(file);
    return path;
}

}  // namespace

TEST_CASE("features match the numpy reference on the committed fixtures", "[spoken_digits]") {
    // Both sides compute in double (C++: Eigen's FFT; numpy: pocketfft) from the same 16-bit
    // samples, so they differ by rounding of order 1e-12 relative to a frame's energy; near the
    // 1e-6 log floor that is still below 1e-5 in the log. Then the C++ result is stored as float
    // (relative 6e-8: under 2e-6 for |log energy| <= 25) and the reference as 7 significant
    // digits (under 1e-5 for values up to 100). 1e-4 is ten times all of that together, and far
    // below any real mistake: a misplaced filter, a wrong window or rounding the hop the other
    // way moves values by 1e-2 or more.
    constexpr double kTolerance = 1e-4;
    for (const std::string name : {"seven_oh_two", "tone_16k"}) {
        INFO(name);
        const std::string wav = kTestdata + "/" + name + ".wav";
        const spoken_digits::Audio audio = spoken_digits::read_audio(wav);
        const Features raw = spoken_digits::log_mel(audio.samples, audio.sample_rate, wav);
        CHECK(max_difference(raw, read_table(kTestdata + "/" + name + ".logmel.txt")) < kTolerance);
        const Features normalised = spoken_digits::compute_features(wav);
        CHECK(max_difference(normalised, read_table(kTestdata + "/" + name + ".features.txt")) <
              kTolerance);
    }
}

TEST_CASE("frames are 25 ms windows every 10 ms at the file's own rate", "[spoken_digits]") {
    const spoken_digits::FrameLayout at_22050 = spoken_digits::frame_layout(22050);
    CHECK(at_22050.window == 551);  // 551.25 samples
    CHECK(at_22050.hop == 221);     // 220.5, rounded half up
    CHECK(at_22050.fft_size == 1024);
    const spoken_digits::FrameLayout at_16000 = spoken_digits::frame_layout(16000);
    CHECK(at_16000.window == 400);
    CHECK(at_16000.hop == 160);
    CHECK(at_16000.fft_size == 512);

    CHECK(spoken_digits::frame_count(399, at_16000) == 0);
    CHECK(spoken_digits::frame_count(400, at_16000) == 1);
    CHECK(spoken_digits::frame_count(559, at_16000) == 1);
    CHECK(spoken_digits::frame_count(560, at_16000) == 2);

    // The fixtures' frame counts follow from their lengths.
    const spoken_digits::Audio tone = spoken_digits::read_audio(kTestdata + "/tone_16k.wav");
    CHECK(tone.sample_rate == 16000);
    CHECK(spoken_digits::compute_features(kTestdata + "/tone_16k.wav").frames ==
          spoken_digits::frame_count(static_cast<int64_t>(tone.samples.size()), at_16000));
}

TEST_CASE("the mel filters are triangles that tile the spectrum", "[spoken_digits]") {
    for (const int rate : {16000, 22050}) {
        INFO(rate);
        const int64_t fft_size = spoken_digits::frame_layout(rate).fft_size;
        const int64_t bins = fft_size / 2 + 1;
        const int bands = spoken_digits::kMelBands;
        const std::vector<double> w = spoken_digits::mel_filterbank(rate, fft_size, bands);
        REQUIRE(static_cast<int64_t>(w.size()) == bands * bins);
        // Each band's peak bin lies above the previous band's: centres rise with the mel scale.
        int64_t previous_peak = -1;
        for (int b = 0; b < bands; ++b) {
            int64_t peak = 0;
            for (int64_t k = 0; k < bins; ++k) {
                CHECK(w[b * bins + k] >= 0.0);
                CHECK(w[b * bins + k] <= 1.0);
                if (w[b * bins + k] > w[b * bins + peak]) peak = k;
            }
            CHECK(peak > previous_peak);
            previous_peak = peak;
        }
        // Neighbouring triangles share corners, so between the first and the last centre the
        // weights of each bin add up to 1 (band 0's falling edge starts at its centre).
        const double nyquist = rate / 2.0;
        const double mel_step = 2595.0 * std::log10(1.0 + nyquist / 700.0) / (bands + 1);
        const double first_centre = 700.0 * (std::pow(10.0, mel_step / 2595.0) - 1.0);
        const double last_centre = 700.0 * (std::pow(10.0, bands * mel_step / 2595.0) - 1.0);
        for (int64_t k = 0; k < bins; ++k) {
            const double hz = static_cast<double>(k) * rate / fft_size;
            if (hz < first_centre || hz > last_centre) continue;
            double total = 0.0;
            for (int b = 0; b < bands; ++b) total += w[b * bins + k];
            CHECK(total == Approx(1.0).margin(1e-9));
        }
    }
}

TEST_CASE("normalised features have zero mean and unit variance per band", "[spoken_digits]") {
    const Features f = spoken_digits::compute_features(kTestdata + "/seven_oh_two.wav");
    REQUIRE(f.bands == spoken_digits::kMelBands);
    for (int64_t b = 0; b < f.bands; ++b) {
        double mean = 0.0, square = 0.0;
        for (int64_t t = 0; t < f.frames; ++t) {
            mean += f.values[t * f.bands + b];
            square += double{f.values[t * f.bands + b]} * f.values[t * f.bands + b];
        }
        mean /= f.frames;
        // var / (var + kVarianceFloor) with var of order 1 or more: 1 to within 1e-5.
        CHECK(mean == Approx(0.0).margin(1e-5));
        CHECK(square / f.frames - mean * mean == Approx(1.0).margin(1e-5));
    }
}

TEST_CASE("unreadable or unsupported audio is refused with the file's name", "[spoken_digits]") {
    using Catch::Matchers::Contains;
    const std::string missing = kTestdata + "/no_such_file.wav";
    CHECK_THROWS_AS(spoken_digits::read_audio(missing), lstm::InvalidArgument);
    CHECK_THROWS_WITH(spoken_digits::read_audio(missing), Contains("no_such_file.wav"));

    const std::string not_audio = (scratch() / "spoken_digits_not_audio.wav").string();
    std::ofstream(not_audio) << "this is not a WAV file\n";
    CHECK_THROWS_WITH(spoken_digits::read_audio(not_audio),
                      Contains("spoken_digits_not_audio.wav") && Contains("cannot read"));

    const std::string stereo = write_wav("spoken_digits_stereo.wav", 2, 8000, 16000);
    CHECK_THROWS_WITH(spoken_digits::read_audio(stereo),
                      Contains("spoken_digits_stereo.wav") && Contains("2 channels"));

    // A WAV file cut short: libsndfile alone would read the samples that are left.
    const std::string cut = write_wav("spoken_digits_cut.wav", 1, 8000, 16000);
    std::filesystem::resize_file(cut, std::filesystem::file_size(cut) / 2);
    CHECK_THROWS_WITH(spoken_digits::read_audio(cut),
                      Contains("spoken_digits_cut.wav") && Contains("truncated"));

    // 399 samples at 16 kHz: one short of a 25 ms window, so no frame.
    const std::string short_file = write_wav("spoken_digits_short.wav", 1, 399, 16000);
    CHECK_THROWS_AS(spoken_digits::compute_features(short_file), lstm::InvalidArgument);
    CHECK_THROWS_WITH(spoken_digits::compute_features(short_file),
                      Contains("spoken_digits_short.wav") && Contains("fewer than one"));
    // 400 samples: exactly one frame.
    CHECK(
        spoken_digits::compute_features(write_wav("spoken_digits_one.wav", 1, 400, 16000)).frames ==
        1);

    // At 1 kHz the FFT bins are 31 Hz apart, coarser than the lowest mel bands.
    const std::vector<float> second(1000, 0.1f);
    CHECK_THROWS_AS(spoken_digits::log_mel(second, 1000, "low_rate"), lstm::Unsupported);
}
