// lstm/io: safetensors round trips (bit-exact), the reader's error for every kind of malformed
// file, nn.LSTM state_dict import/export, and PyTorch-written fixtures (tests/data/) imported and
// run through the double reference.

#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "lstm/io/checkpoint.hpp"
#include "lstm/io/safetensors.hpp"
#include "lstm/io/state_dict.hpp"
#include "lstm/memory.hpp"
#include "lstm/nn/model.hpp"
#include "lstm/reference/lstm_reference.hpp"
#include "test_data.hpp"
#include "test_util.hpp"
#include "tolerance.hpp"

using namespace lstm;
using namespace lstm::io;

namespace {

using lstm::test::data_path;

// A file from a header text and a data buffer, with the length prefix filled in, so each test
// states the exact malformation it checks.
std::vector<unsigned char> make_file(const std::string& header, size_t buffer_bytes,
                                     uint64_t header_length_override = 0) {
    std::vector<unsigned char> out(8 + header.size() + buffer_bytes, 0);
    const uint64_t n = header_length_override ? header_length_override : header.size();
    for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(n >> (8 * i));
    std::memcpy(out.data() + 8, header.data(), header.size());
    return out;
}

// The message of the lstm::Error that parsing `bytes` throws ("" when it does not throw).
std::string parse_error(const std::vector<unsigned char>& bytes) {
    try {
        parse_safetensors(bytes, "bad.safetensors");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

Tensor f32_tensor(const std::string& name, std::vector<int64_t> shape, uint64_t seed) {
    Tensor t;
    t.name = name;
    t.dtype = ScalarType::f32;
    t.shape = std::move(shape);
    const auto v = test::random_vector<float>(static_cast<size_t>(t.numel()), seed);
    return Tensor::from(name, t.shape, v);
}

std::vector<int64_t> shape_of(const ParamEntry& e) {
    return e.cols == 0 ? std::vector<int64_t>{e.rows} : std::vector<int64_t>{e.rows, e.cols};
}

// A stack config with nn.LSTM's proj_size and bias set, which the positional aggregate form
// hides behind four other fields.
Config lstm_config(int64_t input, int64_t hidden, int64_t layers, bool bidirectional,
                   int64_t proj_size, bool bias) {
    Config c{input, hidden, layers, bidirectional};
    c.proj_size = proj_size;
    c.bias = bias;
    return c;
}

// The message of the lstm::Error that infer_lstm_config(file) throws ("" when it does not).
std::string infer_error(const TensorFile& file) {
    try {
        infer_lstm_config(file);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("safetensors round trip is bit-exact for every dtype, rank and special value", "[io]") {
    TensorFile file;
    // Values whose bits matter: signed zero, infinities, a NaN payload, denormals, extremes.
    const std::vector<float> f32 = {0.0f,
                                    -0.0f,
                                    std::numeric_limits<float>::infinity(),
                                    -std::numeric_limits<float>::infinity(),
                                    std::numeric_limits<float>::denorm_min(),
                                    std::numeric_limits<float>::max(),
                                    1.0f / 3.0f,
                                    -2.5f};
    std::vector<float> nan_payload(1);
    const uint32_t bits = 0x7fc01234u;
    std::memcpy(nan_payload.data(), &bits, 4);
    const std::vector<double> f64 = {
        std::numeric_limits<double>::lowest(), -0.0, 1e-310, std::nan("7"), 0.1, 2.0 / 3.0};
    const std::vector<int32_t> i32 = {std::numeric_limits<int32_t>::min(), -1, 0, 1,
                                      std::numeric_limits<int32_t>::max(), 7};
    const std::vector<int64_t> i64 = {std::numeric_limits<int64_t>::min(), -1, 0,
                                      std::numeric_limits<int64_t>::max()};
    file.add(Tensor::from("f32", {2, 2, 2}, f32));
    file.add(Tensor::from("nan", {1}, nan_payload));
    file.add(Tensor::from("f64", {3, 2}, f64));
    file.add(Tensor::from("i32", {1, 2, 3}, i32));
    file.add(Tensor::from("i64", {4}, i64));
    file.add(Tensor::from("scalar", {}, std::vector<double>{42.0}));
    file.add(Tensor::from("empty", {0, 3}, std::vector<float>{}));
    file.add(Tensor::from("rank4", {1, 2, 1, 2}, std::vector<int32_t>{1, 2, 3, 4}));
    file.metadata["format"] = "pt";
    file.metadata["note"] = "unicode \xc3\xa9 and \"quotes\"";

    const std::vector<unsigned char> bytes = serialize_safetensors(file);
    // The data of every tensor starts aligned to its element size.
    const uint64_t header = bytes[0] | (uint64_t(bytes[1]) << 8);
    CHECK((8 + header) % 8 == 0);
    const TensorFile back = parse_safetensors(bytes);
    CHECK(back == file);
    REQUIRE(back.size() == file.size());
    for (size_t k = 0; k < file.size(); ++k) {
        CHECK(back.tensors()[k].name == file.tensors()[k].name);  // order kept
        CHECK(back.tensors()[k].bytes == file.tensors()[k].bytes);
    }
    CHECK(back.at("scalar").numel() == 1);
    CHECK(back.at("empty").numel() == 0);
    CHECK(back.at("i64").values<int64_t>() == i64);
    CHECK(back.at("i32").integers() == std::vector<int64_t>(i32.begin(), i32.end()));
    CHECK(back.metadata == file.metadata);

    // Through a file on disk, and a second serialisation is byte-identical.
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("io_test_roundtrip_" + std::to_string(::getpid()) + ".safetensors"))
                                 .string();
    write_safetensors(path, back);
    const TensorFile disk = read_safetensors(path);
    CHECK(disk == file);
    CHECK(disk.source == path);
    CHECK(serialize_safetensors(disk) == bytes);
    std::remove(path.c_str());

    // Empty tensors may have huge other dimensions.
    const TensorFile huge = parse_safetensors(make_file(
        R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})", 0));
    CHECK(huge.at("a").numel() == 0);
    CHECK(parse_safetensors(serialize_safetensors(huge)) == huge);

    // An empty file (no tensors) is valid too.
    CHECK(parse_safetensors(serialize_safetensors(TensorFile())).size() == 0);
}

TEST_CASE("safetensors files written by PyTorch parse and re-serialize losslessly", "[io]") {
    for (const char* name :
         {"lstm_bi2_varlen.params.safetensors", "lstm_bi1_varlen.inputs.safetensors",
          "ctc_logprobs_concat.inputs.safetensors"}) {
        INFO(name);
        const TensorFile file = read_safetensors(data_path(name));
        CHECK(file.size() > 0);
        CHECK(file.metadata.at("generator") == "tests/data/make_fixtures.py");
        CHECK(parse_safetensors(serialize_safetensors(file)) == file);
    }
    const TensorFile inputs = read_safetensors(data_path("lstm_bi1_varlen.inputs.safetensors"));
    CHECK(inputs.at("lengths").dtype == ScalarType::i32);
    CHECK(inputs.at("lengths").integers() == std::vector<int64_t>{6, 2, 4});
}

TEST_CASE("safetensors tensor accessors refuse silent conversions", "[io]") {
    const Tensor t = Tensor::from("w", {2}, std::vector<double>{1, 2});
    CHECK_THROWS_WITH(t.values<float>(), "tensor 'w' has dtype F64, expected F32");
    CHECK_THROWS_WITH(t.integers(), Catch::Contains("expected an integer type"));
    CHECK(t.floats_as_double() == std::vector<double>{1, 2});
    CHECK_THROWS_WITH(Tensor::from("v", {3}, std::vector<float>{1, 2}),
                      Catch::Contains("has 3 elements but 2 values were given"));
    TensorFile file;
    file.add(t);
    CHECK_THROWS_WITH(file.add(t), Catch::Contains("duplicate tensor name 'w'"));
    CHECK_THROWS_WITH(file.at("v"), Catch::Contains("no tensor named 'v'; the file has 'w'"));
    CHECK_THROWS_WITH(read_safetensors("no/such/file.safetensors"),
                      Catch::Contains("cannot open 'no/such/file.safetensors'"));
    CHECK_THROWS_WITH(read_safetensors(std::filesystem::temp_directory_path().string()),
                      Catch::Contains("is a directory, not a safetensors file"));
}

TEST_CASE("a save that fails leaves the previous file whole and says why", "[io]") {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("io_test_atomic_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "model.safetensors").string();
    TensorFile small;
    small.add(Tensor::from("w", {2}, std::vector<float>{1, 2}));
    write_safetensors(path, small);
    TensorFile large;
    large.add(Tensor::from("w", {1 << 16}, std::vector<float>(1 << 16, 3.0f)));

    // A full disk, stood in for by a file size limit of 8 KiB (SIGXFSZ ignored, so the write
    // fails with EFBIG instead of killing the process); both restored before any CHECK.
    rlimit before{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &before) == 0);
    rlimit capped = before;
    capped.rlim_cur = 8192;
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &capped) == 0);
    std::string message;
    try {
        write_safetensors(path, large);
    } catch (const lstm::Error& e) {
        message = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &before);
    std::signal(SIGXFSZ, old_handler);
    CHECK_THAT(message, Catch::StartsWith("error while writing '" + path + "': File too large"));
    CHECK(read_safetensors(path) == small);

    // A target that cannot be replaced (a directory): refused by name, nothing left behind.
    const std::string blocked = (dir / "blocked").string();
    std::filesystem::create_directories(std::filesystem::path(blocked) / "inside");
    CHECK_THROWS_WITH(write_safetensors(blocked, small),
                      Catch::StartsWith("cannot replace '" + blocked + "'"));
    std::vector<std::string> left;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
        left.push_back(entry.path().filename().string());
    std::sort(left.begin(), left.end());
    CHECK(left == std::vector<std::string>{"blocked", "model.safetensors"});

    // Through a link, the linked file is replaced and the link stays.
    const std::string link = (dir / "latest.safetensors").string();
    std::filesystem::create_symlink(path, link);
    write_safetensors(link, large);
    CHECK(std::filesystem::is_symlink(link));
    CHECK(read_safetensors(path) == large);
    std::filesystem::remove_all(dir);
}

TEST_CASE("a tensor built by hand must agree with itself before anything reads its bytes", "[io]") {
    // The fields are public: bytes of another size than the shape and dtype say would be read or
    // written past their end by values(), serialisation and every import.
    Tensor short_bytes = Tensor::from("w", {4}, std::vector<float>{1, 2, 3, 4});
    short_bytes.bytes.resize(4);
    CHECK_THROWS_WITH(short_bytes.values<float>(),
                      "tensor 'w': shape (4) of F32 needs 16 bytes, it holds 4");
    TensorFile file;
    CHECK_THROWS_WITH(file.add(short_bytes), Catch::Contains("needs 16 bytes, it holds 4"));
    Tensor long_bytes = short_bytes;
    long_bytes.bytes.resize(1 << 20);
    CHECK_THROWS_WITH(file.add(long_bytes), Catch::Contains("it holds 1048576"));
    CHECK(file.size() == 0);

    // A count past 64 bits is refused, not wrapped into an empty tensor.
    const int64_t big = int64_t{1} << 40;
    CHECK_THROWS_WITH(Tensor::from("big", {big, big}, std::vector<float>{}),
                      "tensor 'big': shape (1099511627776, 1099511627776) has more than "
                      "2^63 - 1 elements");
    CHECK_THROWS_WITH(Tensor::from("wide", {int64_t{1} << 62}, static_cast<const double*>(nullptr)),
                      Catch::Contains("shape (4611686018427387904) of F64 has more than "
                                      "2^64 - 1 bytes"));
    Tensor negative = short_bytes;
    negative.shape = {-4};
    CHECK_THROWS_WITH(negative.numel(), "tensor 'w': shape (-4) has a negative size");
}

TEST_CASE("malformed safetensors files each give their specific error", "[io]") {
    using Catch::Contains;
    const std::string a24 = R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})";
    // The well-formed base case all others deviate from.
    REQUIRE(parse_error(make_file("{" + a24 + "}", 24)).empty());

    SECTION("structure") {
        CHECK_THAT(parse_error({1, 2, 3}), Contains("3 bytes is too short"));
        CHECK_THAT(parse_error(make_file("{}", 0, 1000)),
                   Contains("header length 1000 exceeds the 2 bytes that follow it"));
        CHECK_THAT(parse_error(make_file("{}", 0, ~uint64_t(0))),
                   Contains("exceeds the 2 bytes that follow it"));
        CHECK_THAT(parse_error(make_file("{\"a\":", 0)), Contains("header is not valid JSON"));
        CHECK_THAT(parse_error(make_file("[1,2]", 0)), Contains("header must be a JSON object"));
        // Valid JSON, then a NUL and garbage inside the header length: the offset is the NUL's
        // from the start of the file (8 length bytes, then the 2 bytes of "{}").
        CHECK_THAT(parse_error(make_file(std::string("{}\0garbage", 10), 0)),
                   Contains("header holds a NUL byte at offset 10"));
        REQUIRE(parse_error(make_file("{}    ", 0)).empty());  // space padding is the format's
        CHECK_THAT(parse_error(make_file("{\"a\":{\"b\":{\"c\":{\"d\":[]}}}}", 0)),
                   Contains("nests deeper"));
        CHECK_THAT(parse_error(make_file("{" + a24 + "," + a24 + "}", 24)),
                   Contains("duplicate tensor name 'a'"));
        CHECK_THAT(
            parse_error(make_file(
                R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4)),
            Contains("duplicate key 'dtype'"));
        CHECK_THAT(parse_error(make_file(R"({"__metadata__":{"k":1}})", 0)),
                   Contains("__metadata__ value of 'k' must be a string"));
        CHECK_THAT(parse_error(make_file(R"({"__metadata__":[]})", 0)),
                   Contains("__metadata__ must be an object"));
    }
    SECTION("entries") {
        CHECK_THAT(parse_error(make_file(R"({"a":3})", 0)),
                   Contains("tensor 'a': header entry must be an object"));
        CHECK_THAT(parse_error(make_file(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4)),
                   Contains("tensor 'a': missing field 'shape'"));
        CHECK_THAT(parse_error(make_file(
                       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4)),
                   Contains("tensor 'a': unknown field 'x'"));
        CHECK_THAT(
            parse_error(make_file(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})", 4)),
            Contains("tensor 'w': unsupported dtype 'BF16' (supported: F32, F64, I32, I64)"));
        CHECK_THAT(
            parse_error(make_file(R"({"w":{"dtype":32,"shape":[2],"data_offsets":[0,4]}})", 4)),
            Contains("tensor 'w': dtype must be a string"));
        CHECK_THAT(
            parse_error(make_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)),
            Contains("tensor 'w': shape must hold non-negative integers, got -2"));
        CHECK_THAT(parse_error(
                       make_file(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}})", 8)),
                   Contains("tensor 'w': shape must hold non-negative integers"));
        CHECK_THAT(
            parse_error(make_file(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8)),
            Contains("tensor 'w': shape must be an array"));
        CHECK_THAT(
            parse_error(
                make_file(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296,4294967296],)"
                          R"("data_offsets":[0,8]}})",
                          8)),
            Contains("tensor 'w': shape (4294967296, 4294967296, 4294967296) has more bytes"));
        CHECK_THAT(
            parse_error(make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8)),
            Contains("tensor 'w': data_offsets must be [begin, end], got [0]"));
    }
    SECTION("dtype and shape against the byte count") {
        CHECK_THAT(parse_error(make_file(
                       R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20)),
                   Contains("tensor 'w': dtype F32 with shape (2, 3) needs 24 bytes, but "
                            "data_offsets [0, 20] span 20"));
        CHECK_THAT(parse_error(
                       make_file(R"({"w":{"dtype":"F64","shape":[3],"data_offsets":[0,12]}})", 12)),
                   Contains("tensor 'w': dtype F64 with shape (3) needs 24 bytes"));
        CHECK_THAT(
            parse_error(make_file(R"({"w":{"dtype":"I64","shape":[],"data_offsets":[0,4]}})", 4)),
            Contains("shape () needs 8 bytes"));
    }
    SECTION("offsets") {
        CHECK_THAT(
            parse_error(make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4)),
            Contains("tensor 'w': data_offsets [0, 8] reach beyond the 4-byte data buffer"));
        CHECK_THAT(
            parse_error(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8)),
            Contains("tensor 'w': data_offsets [8, 4] end before they begin"));
        CHECK_THAT(
            parse_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                  12)),
            Contains("tensor 'b': data_offsets [4, 12] overlap those of tensor 'a' [0, 8]"));
        CHECK_THAT(
            parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                  R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                  12)),
            Contains("tensor 'b': data_offsets begin at 8 but the previous tensor ends at 4"));
        CHECK_THAT(
            parse_error(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 10)),
            Contains("the data buffer has 10 bytes but the tensors cover 4 (trailing"));
        CHECK_THAT(
            parse_error(make_file(
                R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})", 4)),
            Contains("reach beyond"));
    }
    SECTION("messages start with the file's name") {
        CHECK_THAT(parse_error(make_file("{\"a\":", 0)), Catch::StartsWith("bad.safetensors: "));
    }
}

TEST_CASE("nn.LSTM state_dict export then import is bit-exact and infers the config", "[io]") {
    for (const Config& config : {Config{3, 4, 1, false}, Config{3, 4, 1, true},
                                 Config{2, 5, 3, false}, Config{7, 1, 2, true}}) {
        INFO("layers " << config.num_layers << ", bidirectional " << config.bidirectional);
        const auto params = test::random_vector<float>(param_count(config), 11);
        TensorFile file;
        export_lstm(file, config, Span<const float>(params.data(), params.size()), "lstm.");
        file.add(f32_tensor("decoder.weight", {2, 3}, 5));  // another module: ignored
        const TensorFile back = parse_safetensors(serialize_safetensors(file));
        // PyTorch's names and shapes, in parameters() order.
        const std::vector<ParamEntry> entries = param_entries(config);
        for (size_t k = 0; k < entries.size(); ++k) {
            CHECK(back.tensors()[k].name == "lstm." + entries[k].name);
            CHECK(back.tensors()[k].shape == shape_of(entries[k]));
        }
        const ImportedLstm<float> imported = import_lstm<float>(back, "lstm.");
        CHECK(imported.config == config);
        CHECK(std::memcmp(imported.params.data(), params.data(), params.size() * 4) == 0);
        // F32 widens into double exactly.
        const ImportedLstm<double> wide = import_lstm<double>(back, "lstm.");
        CHECK(wide.params == std::vector<double>(params.begin(), params.end()));
    }
    const TensorFile torch_file =
        read_safetensors(data_path("lstm_uni2_varlen.params.safetensors"));
    CHECK(infer_lstm_config(torch_file) == Config{2, 3, 2, false});
}

TEST_CASE("nn.LSTM state_dicts with bias=False or proj_size infer and round-trip", "[io]") {
    SECTION("PyTorch-written files") {
        struct Case {
            const char* name;
            Config config;
        };
        for (const Case& c :
             {Case{"lstm_proj_bi2_varlen", lstm_config(3, 5, 2, true, 2, true)},
              Case{"lstm_nobias_uni2", lstm_config(3, 4, 2, false, 0, false)},
              Case{"lstm_proj_nobias_uni1", lstm_config(2, 6, 1, false, 3, false)}}) {
            INFO(c.name);
            const TensorFile file =
                read_safetensors(data_path(std::string(c.name) + ".params.safetensors"));
            const Config inferred = infer_lstm_config(file);
            CHECK(inferred == c.config);
            // What the generator says it gave nn.LSTM, so the expected configs above cannot
            // drift from the files.
            CHECK(file.metadata.at("proj_size") == std::to_string(inferred.proj_size));
            CHECK(file.metadata.at("bias") == (inferred.bias ? "true" : "false"));
            // PyTorch's state_dict order is parameters() order: the same names, in the same
            // order, as param_entries().
            const std::vector<ParamEntry> entries = param_entries(inferred);
            REQUIRE(file.size() == entries.size());
            for (size_t k = 0; k < entries.size(); ++k) {
                CHECK(file.tensors()[k].name == entries[k].name);
                CHECK(file.tensors()[k].shape == shape_of(entries[k]));
            }
        }
    }
    SECTION("export then import") {
        for (const Config& config :
             {lstm_config(3, 4, 2, true, 2, true), lstm_config(3, 4, 2, true, 0, false),
              lstm_config(3, 4, 2, true, 3, false), lstm_config(5, 3, 3, false, 1, false),
              lstm_config(2, 6, 1, false, 5, true)}) {
            INFO("layers " << config.num_layers << ", bidirectional " << config.bidirectional
                           << ", proj_size " << config.proj_size << ", bias " << config.bias);
            const auto params = test::random_vector<float>(param_count(config), 21);
            TensorFile file;
            export_lstm(file, config, Span<const float>(params.data(), params.size()), "enc.");
            const TensorFile back = parse_safetensors(serialize_safetensors(file));
            const ImportedLstm<float> imported = import_lstm<float>(back, "enc.");
            CHECK(imported.config == config);
            CHECK(std::memcmp(imported.params.data(), params.data(), params.size() * 4) == 0);
            CHECK((back.find("enc.bias_ih_l0") != nullptr) == config.bias);
            CHECK((back.find("enc.weight_hr_l0") != nullptr) == (config.proj_size > 0));
        }
        // Exactly PyTorch's names for LSTM(2, 3, bidirectional=True, proj_size=1, bias=False).
        const Config config = lstm_config(2, 3, 1, true, 1, false);
        const std::vector<float> params(static_cast<size_t>(param_count(config)), 0.5f);
        TensorFile file;
        export_lstm(file, config, Span<const float>(params.data(), params.size()));
        std::vector<std::string> names;
        for (const Tensor& t : file.tensors()) names.push_back(t.name);
        CHECK(names == std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "weight_hr_l0",
                                                "weight_ih_l0_reverse", "weight_hh_l0_reverse",
                                                "weight_hr_l0_reverse"});
        CHECK(file.at("weight_hh_l0_reverse").shape == std::vector<int64_t>{12, 1});
        CHECK(file.at("weight_hr_l0_reverse").shape == std::vector<int64_t>{1, 3});
    }
    SECTION("what is wrong with a projection or bias=False file is listed") {
        using Catch::Contains;
        const Config config = lstm_config(3, 4, 2, true, 2, false);
        const auto params = test::random_vector<float>(param_count(config), 22);
        TensorFile full;
        export_lstm(full, config, Span<const float>(params.data(), params.size()));
        full.source = "proj.safetensors";
        REQUIRE(infer_error(full).empty());
        // A copy of `full` with `replace` swapped in and `extra` added.
        auto edited = [&](const Tensor* replace, const Tensor* extra) {
            TensorFile out;
            out.source = full.source;
            for (const Tensor& t : full.tensors())
                out.add(replace && replace->name == t.name ? *replace : t);
            if (extra) out.add(*extra);
            return out;
        };
        const Tensor wide_hr = f32_tensor("weight_hr_l0", {2, 5}, 3);
        const std::string wide = infer_error(edited(&wide_hr, nullptr));
        CHECK_THAT(wide, Contains("(input_size 3, hidden_size 4, proj_size 2, num_layers 2, "
                                  "bidirectional, bias=False)"));
        CHECK_THAT(wide, Contains("wrong shape: weight_hr_l0 is (2, 5), expected (2, 4)"));
        const Tensor square_hr = f32_tensor("weight_hr_l0", {4, 4}, 3);
        CHECK_THAT(infer_error(edited(&square_hr, nullptr)),
                   Contains("weight_hr_l0 has shape (4, 4), expected (proj_size, hidden_size) "
                            "with 1 <= proj_size < hidden_size = 4"));
        const Tensor flat_hr = f32_tensor("weight_hr_l0", {8}, 3);
        CHECK_THAT(infer_error(edited(&flat_hr, nullptr)),
                   Contains("weight_hr_l0 has shape (8), expected (proj_size, hidden_size)"));
        const Tensor bad_hh = f32_tensor("weight_hh_l1_reverse", {16, 4}, 3);
        CHECK_THAT(infer_error(edited(&bad_hh, nullptr)),
                   Contains("wrong shape: weight_hh_l1_reverse is (16, 4), expected (16, 2)"));
        // Without a bias in layer 0 the file is bias=False, so a later layer's bias is extra.
        const Tensor late_bias = f32_tensor("bias_ih_l1", {16}, 3);
        CHECK_THAT(infer_error(edited(nullptr, &late_bias)), Contains("unexpected: bias_ih_l1"));
        // A bias in layer 0 makes every cell need both.
        const Tensor first_bias = f32_tensor("bias_hh_l0", {16}, 3);
        const std::string biased = infer_error(edited(nullptr, &first_bias));
        CHECK_THAT(biased, Contains("missing: bias_ih_l0 (16), bias_ih_l0_reverse (16), "
                                    "bias_hh_l0_reverse (16)"));
        CHECK_THAT(biased, !Contains("bias=False"));
    }
}

TEST_CASE("nn.LSTM state_dict import lists missing, extra and mis-shaped tensors", "[io]") {
    using Catch::Contains;
    const Config config{3, 4, 2, true};
    const auto params = test::random_vector<float>(param_count(config), 12);
    TensorFile full;
    export_lstm(full, config, Span<const float>(params.data(), params.size()));
    // A copy of `full` with `drop` removed, `replace` swapped in and `extra` added.
    auto edited = [&](const std::string& drop, const Tensor* replace, const Tensor* extra) {
        TensorFile out;
        out.source = "edited.safetensors";
        for (const Tensor& t : full.tensors()) {
            if (t.name == drop) continue;
            out.add(replace && replace->name == t.name ? *replace : t);
        }
        if (extra) out.add(*extra);
        return out;
    };
    const auto error_of = infer_error;

    CHECK_THAT(error_of(edited("bias_hh_l1_reverse", nullptr, nullptr)),
               Contains("missing: bias_hh_l1_reverse (16)"));
    const Tensor extra = f32_tensor("weight_ih_l2", {16, 8}, 3);  // implies a third layer
    CHECK_THAT(error_of(edited("", nullptr, &extra)),
               Contains("missing: weight_hh_l2 (16, 4), bias_ih_l2 (16), bias_hh_l2 (16), "
                        "weight_ih_l2_reverse (16, 8)"));
    const Tensor stray = f32_tensor("running_mean", {4}, 3);
    CHECK_THAT(error_of(edited("", nullptr, &stray)), Contains("unexpected: running_mean"));
    const Tensor bad_shape = f32_tensor("weight_hh_l1", {16, 5}, 3);
    CHECK_THAT(error_of(edited("", &bad_shape, nullptr)),
               Contains("wrong shape: weight_hh_l1 is (16, 5), expected (16, 4)"));
    // A weight_hr_l0 makes a projection config: in a file without the projection's other
    // tensors, their absence and the (16, 4) weight_hh tensors are what is wrong.
    const Tensor proj = f32_tensor("weight_hr_l0", {2, 4}, 3);
    const std::string projected = error_of(edited("", nullptr, &proj));
    CHECK_THAT(projected, Contains("(input_size 3, hidden_size 4, proj_size 2, num_layers 2"));
    CHECK_THAT(projected, Contains("missing: weight_hr_l0_reverse (2, 4), weight_hr_l1 (2, 4)"));
    CHECK_THAT(projected, Contains("wrong shape: weight_hh_l0 is (16, 4), expected (16, 2)"));
    // Only one bias of a cell is a missing bias, not a bias=False config with a stray tensor.
    CHECK_THAT(error_of(edited("bias_ih_l0", nullptr, nullptr)),
               Contains("missing: bias_ih_l0 (16)"));
    const std::string no_hh = error_of(edited("bias_hh_l0", nullptr, nullptr));
    CHECK_THAT(no_hh, Contains("missing: bias_hh_l0 (16)"));
    CHECK_THAT(no_hh, !Contains("bias=False"));
    const Tensor ints = Tensor::from("bias_ih_l0", {16}, std::vector<int32_t>(16, 1));
    CHECK_THAT(error_of(edited("", &ints, nullptr)),
               Contains("wrong dtype (F32 or F64 expected): bias_ih_l0 is I32"));
    CHECK_THAT(error_of(edited("weight_ih_l0", nullptr, nullptr)),
               Contains("not an nn.LSTM state_dict: no tensor 'weight_ih_l0'"));
    const Tensor odd = f32_tensor("weight_ih_l0", {15, 3}, 3);
    CHECK_THAT(error_of(edited("", &odd, nullptr)),
               Contains("weight_ih_l0 has shape (15, 3), expected (4 * hidden_size, input_size)"));
    const Tensor deep = f32_tensor("bias_ih_l5000", {16}, 3);
    CHECK_THAT(error_of(edited("", nullptr, &deep)), Contains("names layer 5000"));
    // Several problems at once are all listed in one message.
    const std::string both = error_of(edited("weight_hh_l0", &bad_shape, &stray));
    CHECK_THAT(both, Contains("missing: weight_hh_l0"));
    CHECK_THAT(both, Contains("unexpected: running_mean"));
    CHECK_THAT(both, Contains("wrong shape: weight_hh_l1"));

    // F64 tensors into float parameters would round: refused, not done silently.
    const auto wide = test::random_vector<double>(param_count(config), 13);
    TensorFile f64;
    export_lstm(f64, config, Span<const double>(wide.data(), wide.size()));
    CHECK_THROWS_WITH(import_lstm<float>(f64), Contains("without rounding"));
    CHECK(import_lstm<double>(f64).params == wide);
}

TEST_CASE("PyTorch state_dicts imported here run to PyTorch's float64 results", "[io]") {
    // import -> the double reference must equal what torch.nn.LSTM computed in float64 from the
    // same parameters and inputs, which pins the layout (names, gate order, directions).
    for (const char* name : {"lstm_uni1", "lstm_bi1_varlen", "lstm_uni2_varlen", "lstm_bi2_varlen",
                             "lstm_proj_bi2_varlen", "lstm_nobias_uni2", "lstm_proj_nobias_uni1"}) {
        INFO(name);
        const std::string base = data_path(name);
        const ImportedLstm<double> model = import_lstm<double>(base + ".params.safetensors");
        const TensorFile inputs = read_safetensors(base + ".inputs.safetensors");
        const TensorFile expected = read_safetensors(base + ".expected64.safetensors");
        reference::LstmInputs in;
        in.config = model.config;
        in.params = model.params;
        const Tensor& x = inputs.at("x");
        in.seq_len = x.shape[0];
        in.batch = x.shape[1];
        in.x = x.floats_as_double();
        if (const Tensor* t = inputs.find("lengths")) in.lengths = t->integers();
        if (const Tensor* t = inputs.find("h0")) in.h0 = t->floats_as_double();
        if (const Tensor* t = inputs.find("c0")) in.c0 = t->floats_as_double();
        reference::LstmOutputGrads grads;
        grads.dy = inputs.at("dy").floats_as_double();
        grads.dhn = inputs.at("dhn").floats_as_double();
        grads.dcn = inputs.at("dcn").floats_as_double();

        const auto out = reference::lstm_forward(in);
        const auto back = reference::lstm_backward(in, grads);
        // With a projection h has proj_size features and c hidden_size: the sizes compared below
        // then tell a mix-up apart, and the shapes pin PyTorch's layout of each.
        const Config& c = model.config;
        const std::vector<int64_t> h_shape{c.num_cells(), in.batch, c.state_size()};
        const std::vector<int64_t> c_shape{c.num_cells(), in.batch, c.hidden_size};
        CHECK(expected.at("hn").shape == h_shape);
        CHECK(expected.at("cn").shape == c_shape);
        CHECK(expected.at("y").shape ==
              std::vector<int64_t>{in.seq_len, in.batch, c.output_size()});
        const double rtol = 1e-12;
        LSTM_CHECK_CLOSE(test::compare_scaled("y", out.y, expected.at("y").values<double>(), rtol));
        LSTM_CHECK_CLOSE(
            test::compare_scaled("hn", out.hn, expected.at("hn").values<double>(), rtol));
        LSTM_CHECK_CLOSE(
            test::compare_scaled("cn", out.cn, expected.at("cn").values<double>(), rtol));
        LSTM_CHECK_CLOSE(
            test::compare_scaled("dx", back.dx, expected.at("dx").values<double>(), rtol));
        if (!in.h0.empty()) {
            CHECK(expected.at("dh0").shape == h_shape);
            LSTM_CHECK_CLOSE(
                test::compare_scaled("dh0", back.dh0, expected.at("dh0").values<double>(), rtol));
        }
        if (!in.c0.empty()) {
            CHECK(expected.at("dc0").shape == c_shape);
            LSTM_CHECK_CLOSE(
                test::compare_scaled("dc0", back.dc0, expected.at("dc0").values<double>(), rtol));
        }
        for (const ParamEntry& e : param_entries(model.config)) {
            const std::vector<double> got(back.dparams.begin() + e.offset,
                                          back.dparams.begin() + e.offset + e.numel());
            LSTM_CHECK_CLOSE(test::compare_scaled(
                "grad." + e.name, got, expected.at("grad." + e.name).values<double>(), rtol));
        }
    }
}

namespace {

// A whole file whose header holds n empty F32 tensors "t0", "t1", ... (the shape of a header of
// many tensors at its densest: about 58 header bytes an entry), or n metadata pairs when
// `metadata` (about 12 header bytes a pair, a std::map node each).
std::vector<unsigned char> many_entries(size_t n, bool metadata = false) {
    std::string h = metadata ? "{\"__metadata__\":{" : "{";
    for (size_t k = 0; k < n; ++k) {
        if (k) h += ",";
        h += "\"t" + std::to_string(k) + "\":";
        h += metadata ? "\"v\"" : R"({"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
    }
    h += metadata ? "}}" : "}";
    return make_file(h, 0);
}

std::string temp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() /
            ("io_test_" + std::to_string(::getpid()) + "_" + name))
        .string();
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

// Host heap in use: malloc's arenas and its separately mapped blocks.
int64_t heap_in_use() {
    const struct mallinfo2 m = ::mallinfo2();
    return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

// "VmRSS" or "VmHWM" of /proc/self/status, in bytes; -1 where it cannot be read.
int64_t status_bytes(const std::string& field) {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.compare(0, field.size() + 1, field + ":") == 0)
            return std::stoll(line.substr(field.size() + 1)) * 1024;
    return -1;
}

// How far `body` raises resident memory at its peak above where it started, in bytes: run in a
// forked child (so this process's peak and its free heap do not hide it), after malloc_trim (free
// heap pages the body reuses count as new) and after resetting the kernel's peak (clear_refs 5).
// Negative: the measurement could not be made (-1: no child, -2: the body threw, -4: no peak
// reset), which the caller reports as a skip.
template <typename Body>
int64_t peak_growth(Body body) {
    if (!LSTM_MEMORY_MEASURABLE) return -5;
    int fds[2];
    if (::pipe(fds) != 0) return -1;
    const pid_t child = ::fork();
    if (child < 0) {
        ::close(fds[0]);
        ::close(fds[1]);
        return -1;
    }
    if (child == 0) {
        ::close(fds[0]);
        ::malloc_trim(0);
        int64_t growth = -4;
        std::ofstream reset("/proc/self/clear_refs");
        reset << "5" << std::flush;
        // The peak just after the reset: what the child holds, give or take the buffers of
        // reading /proc; one far above means the reset did not happen.
        const int64_t start = status_bytes("VmHWM");
        if (reset.good() && start > 0 && start <= status_bytes("VmRSS") + (4 << 20)) {
            try {
                body();
                growth = status_bytes("VmHWM") - start;
            } catch (...) {
                growth = -2;
            }
        }
        if (::write(fds[1], &growth, sizeof growth) != sizeof growth) ::_exit(1);
        ::_exit(0);
    }
    ::close(fds[1]);
    int64_t growth = -3;
    if (::read(fds[0], &growth, sizeof growth) != static_cast<ssize_t>(sizeof growth)) growth = -3;
    ::close(fds[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    return growth;
}

}  // namespace

TEST_CASE("a header of 100k tensors is indexed in linear time with about 3 bytes per byte",
          "[io]") {
    constexpr size_t kTensors = 100'000;
    const std::vector<unsigned char> bytes = many_entries(kTensors);
    const double header = static_cast<double>(bytes.size() - 8);

    // What the parsed file keeps: Tensors (sharing one copy of the file's name), their shapes
    // and a 4-byte name index; the DOM-based parse took 54 bytes per header byte.
    const int64_t before = heap_in_use();
    const auto start = std::chrono::steady_clock::now();
    const TensorFile file = parse_safetensors(bytes, "many.safetensors");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double kept = static_cast<double>(heap_in_use() - before) / header;
    REQUIRE(file.size() == kTensors);
    CHECK(file.at("t99999").shape == std::vector<int64_t>{0});
    CHECK(file.tensors()[12345].name == "t12345");
    WARN("parse of a " << header / 1e6 << " MB header of " << kTensors << " tensors: " << seconds
                       << " s, keeps " << kept << " bytes per header byte");
    if (LSTM_MEMORY_MEASURABLE) CHECK(kept <= 3.5);
    CHECK(seconds < 5.0);  // linear: the callback parser once took minutes here

    // The peak, transients included (offsets, the sort order, the lexer's buffer, malloc's own
    // overhead), in a child process: of the parse in memory, and of a read from disk, whose
    // header text (1 byte per header byte) comes on top.
    const std::string path = temp_path("many.safetensors");
    write_bytes(path, bytes);
    const int64_t in_memory = peak_growth([&] { parse_safetensors(bytes, "many.safetensors"); });
    const int64_t from_disk = peak_growth([&] { read_safetensors(path); });
    const int64_t reader = peak_growth([&] { TensorFileReader r(path); });
    std::filesystem::remove(path);
    if (in_memory < 0 || from_disk < 0 || reader < 0)
        LSTM_SKIP(
            "the peak of a child process cannot be measured here (a sanitizer's allocator, or "
            "fork or /proc/self/clear_refs failed: "
            << in_memory << ", " << from_disk << ", " << reader << ")");
    WARN("peak bytes per header byte: parse_safetensors "
         << in_memory / header << ", read_safetensors " << from_disk / header
         << " (the header text included), TensorFileReader " << reader / header);
    CHECK(in_memory / header <= 4.0);
    CHECK((from_disk / header) - 1.0 <= 4.0);
    CHECK((reader / header) - 1.0 <= 4.0);
}

TEST_CASE("the memory check covers the header's parse: refused by name, then parsed", "[io]") {
    using Catch::Contains;
    const std::vector<unsigned char> bytes = many_entries(100'000);
    const uint64_t header = bytes.size() - 8;
    const std::string path = temp_path("limit.safetensors");
    write_bytes(path, bytes);
    {
        // Below the index a header of tensor entries is asked for before the parse starts.
        const lstm::test::MemoryLimitScope limit(2 * header);
        const std::string message =
            lstm::test::out_of_memory_message([&] { read_safetensors(path); });
        CHECK_THAT(message, Contains(path + ": indexing its header of 5.52 MiB"));
        CHECK_THAT(message, Contains("header index"));
        CHECK_THAT(lstm::test::out_of_memory_message([&] { TensorFileReader r(path); }),
                   Contains(path + ": indexing its header"));
        CHECK_THAT(lstm::test::out_of_memory_message(
                       [&] { parse_safetensors(bytes, "many.safetensors"); }),
                   Contains("many.safetensors: indexing its header"));
    }
    CHECK(read_safetensors(path).size() == 100'000);
    CHECK(TensorFileReader(path).size() == 100'000);

    // Metadata of many short strings needs more than the first grant (a std::map node, 112
    // bytes, for about 12 header bytes): asked for as the parse grows, refused by name.
    const std::vector<unsigned char> meta = many_entries(100'000, true);
    const uint64_t meta_header = meta.size() - 8;
    {
        const lstm::test::MemoryLimitScope limit(5 * meta_header);
        CHECK_THAT(
            lstm::test::out_of_memory_message([&] { parse_safetensors(meta, "meta.safetensors"); }),
            Contains("meta.safetensors: indexing its header of"));
    }
    const TensorFile parsed = parse_safetensors(meta, "meta.safetensors");
    CHECK(parsed.metadata.size() == 100'000);
    CHECK(parsed.metadata.at("t99999") == "v");
    std::filesystem::remove(path);
}

TEST_CASE("TensorFileReader reads what read_safetensors reads and refuses what it refuses",
          "[io]") {
    using Catch::Contains;
    TensorFile file;
    file.add(f32_tensor("a", {3, 5}, 1));
    file.add(Tensor::from("b", {2}, std::vector<double>{1.5, -2.0}));
    file.add(Tensor::from("c", {0, 4}, std::vector<float>{}));
    file.add(Tensor::from("d", {}, std::vector<int64_t>{7}));
    // Larger than a read piece, so that it comes in several.
    file.add(f32_tensor("big", {int64_t(TensorFileReader::kReadPieceBytes / 4 + 100)}, 2));
    file.metadata["format"] = "test";
    const std::string path = temp_path("reader.safetensors");
    write_bytes(path, serialize_safetensors(file));

    const TensorFileReader reader(path);
    const TensorFile read = read_safetensors(path);
    CHECK(read == file);
    CHECK(reader.metadata == file.metadata);
    CHECK(reader.source == path);
    REQUIRE(reader.size() == file.size());
    for (size_t k = 0; k < file.size(); ++k) {
        const Tensor& want = file.tensors()[k];
        const TensorInfo& got = reader.tensors()[k];
        INFO(want.name);
        CHECK(got.name == want.name);
        CHECK(got.dtype == want.dtype);
        CHECK(got.shape == want.shape);
        CHECK(got.size == want.bytes.size());
        CHECK(reader.load(got) == want);
        std::vector<unsigned char> pieces;
        size_t count = 0;
        reader.visit_bytes(got, [&](const unsigned char* p, size_t n) {
            CHECK(n <= TensorFileReader::kReadPieceBytes);
            pieces.insert(pieces.end(), p, p + n);
            ++count;
        });
        CHECK(pieces == want.bytes);
        if (want.name == "big") CHECK(count == 2);
    }
    CHECK(reader.with_prefix("b").size() == 2);
    CHECK_THROWS_WITH(reader.at("z"), Contains(path + ": no tensor named 'z'; the file has 'a'"));

    // A file cut short after it was opened: an error naming it, not a crash.
    REQUIRE(::truncate(path.c_str(), 100) == 0);
    CHECK_THROWS_WITH(reader.load(reader.at("big")),
                      Contains("error while reading '" + path + "': it ends at byte"));

    // The same refusals, with the same messages, as parse_safetensors.
    for (const std::string& header :
         {std::string(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})"),
          std::string(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})"),
          std::string("{\"a\":")}) {
        const std::vector<unsigned char> bad = make_file(header, 12);
        write_bytes(path, bad);
        std::string in_memory;
        try {
            parse_safetensors(bad, path);
        } catch (const Error& e) {
            in_memory = e.what();
        }
        REQUIRE_FALSE(in_memory.empty());
        CHECK_THROWS_WITH(TensorFileReader(path), in_memory);
        CHECK_THROWS_WITH(read_safetensors(path), in_memory);
    }
    std::filesystem::remove(path);

    // A FIFO cannot be read at offsets: it is read whole, and parses the same.
    const std::string fifo = temp_path("reader.fifo");
    if (::mkfifo(fifo.c_str(), 0600) != 0)
        LSTM_SKIP("cannot make a FIFO in " << std::filesystem::temp_directory_path() << ": "
                                           << std::strerror(errno));
    const std::vector<unsigned char> bytes = serialize_safetensors(file);
    std::thread writer([&] { write_bytes(fifo, bytes); });
    const TensorFile through_fifo = read_safetensors(fifo);
    writer.join();
    CHECK(through_fifo == file);
    std::filesystem::remove(fifo);
}

namespace {

nn::ModelConfig stream_config() {
    nn::ModelConfig c;
    c.lstm = Config{32, 200, 2, true};
    c.classes = 10;
    c.dense_bias = true;
    c.head = nn::Head::ce_last_step;
    c.adam = nn::adamw_options(0.01, 0.05);
    return c;
}

void train_once(nn::SequenceModel<float>& model) {
    const int64_t steps = 4, batch = 3;
    const auto x = test::random_vector<float>(steps * batch * 32, 77);
    const std::vector<int64_t> lengths{4, 2, 3}, targets{1, 7, 3};
    model.train_step(TensorView<const float>(x.data(), {steps, batch, 32}),
                     Span<const int64_t>(lengths), Span<const int64_t>(targets));
}

// Parameters, both Adam moments and step counts, and the dropout state of a host model.
std::vector<double> model_state(nn::SequenceModel<float>& model) {
    std::vector<double> out(model.lstm().parameters().begin(), model.lstm().parameters().end());
    const Span<const float> dense = std::as_const(model.dense()).parameters();
    out.insert(out.end(), dense.data, dense.data + dense.size);
    nn::Adam<float>& adam = model.optimizer();
    for (int64_t k = 0; k < adam.buffer_count(); ++k) {
        for (const TensorView<float>& v : {adam.exp_avg(k), adam.exp_avg_sq(k)})
            out.insert(out.end(), v.data(), v.data() + v.numel());
        out.push_back(static_cast<double>(adam.steps(k)));
    }
    out.push_back(static_cast<double>(model.lstm().dropout_count()));
    return out;
}

}  // namespace

TEST_CASE("load_checkpoint from a path streams the file, and a bad file changes nothing",
          "[io][nn]") {
    using Catch::Contains;
    nn::SequenceModel<float> trained(stream_config(), "basic", Device::cpu, 3);
    train_once(trained);
    const std::string path = temp_path("stream.ckpt");
    save_checkpoint(path, trained);
    const double file_bytes = static_cast<double>(std::filesystem::file_size(path));

    nn::SequenceModel<float> target(stream_config(), "basic", Device::cpu, 9);
    REQUIRE(model_state(target) != model_state(trained));
    load_checkpoint(path, target);
    CHECK(model_state(target) == model_state(trained));
    // The same as the in-memory file gives.
    nn::SequenceModel<float> from_memory(stream_config(), "basic", Device::cpu, 10);
    load_checkpoint(read_safetensors(path), from_memory);
    CHECK(model_state(from_memory) == model_state(trained));
    nn::SequenceModel<float> params_only(stream_config(), "basic", Device::cpu, 11);
    load_model_parameters(path, params_only);
    CHECK(
        std::vector<float>(params_only.lstm().parameters().begin(),
                           params_only.lstm().parameters().end()) ==
        std::vector<float>(trained.lstm().parameters().begin(), trained.lstm().parameters().end()));

    // Peak host memory a second load adds (every buffer of the model already touched by the
    // first): the header's index and a read piece or two, not the file (it was about twice the
    // file, read whole and then copied).
    const int64_t peak = peak_growth([&] { load_checkpoint(path, target); });
    if (peak >= 0) {
        WARN("load_checkpoint of a " << file_bytes / 1e6 << " MB checkpoint: peak +" << peak / 1e6
                                     << " MB (" << 100.0 * static_cast<double>(peak) / file_bytes
                                     << "% of the file)");
        CHECK(static_cast<double>(peak) < 0.4 * file_bytes);
    } else {
        WARN("the peak of a child process cannot be measured here (" << peak << ")");
    }

    // A negative second moment in the last tensor the loader checks: refused, nothing changed.
    TensorFile bad = read_safetensors(path);
    TensorFile edited;
    edited.metadata = bad.metadata;
    const std::string last = "optimizer.1.exp_avg_sq";
    for (const Tensor& t : bad.tensors()) {
        if (t.name != last) {
            edited.add(t);
            continue;
        }
        std::vector<float> v = t.values<float>();
        v.back() = -1.0f;
        edited.add(Tensor::from(t.name, t.shape, v));
    }
    write_safetensors(path, edited);
    nn::SequenceModel<float> untouched(stream_config(), "basic", Device::cpu, 12);
    const std::vector<double> before = model_state(untouched);
    CHECK_THROWS_WITH(
        load_checkpoint(path, untouched),
        Contains(last + "[" + std::to_string(bad.at(last).numel() - 1) + "] = -1 is negative"));
    CHECK(model_state(untouched) == before);
    // A file cut short: refused from its header, before anything is copied.
    {
        std::vector<unsigned char> bytes = serialize_safetensors(bad);
        bytes.resize(bytes.size() - 4);
        write_bytes(path, bytes);
    }
    CHECK_THROWS_WITH(load_checkpoint(path, untouched), Contains("-byte data buffer"));
    CHECK(model_state(untouched) == before);
    std::filesystem::remove(path);
}
