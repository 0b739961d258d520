// lstm/io: safetensors round trips (bit-exact), the reader's error for every kind of malformed
// file, nn.LSTM state_dict import/export, and PyTorch-written fixtures (tests/data/) imported and
// run through the double reference.

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "lstm/io/safetensors.hpp"
#include "lstm/io/state_dict.hpp"
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
