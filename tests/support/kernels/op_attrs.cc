// Test kernels for tests/test_attrs.py.
//
//   Echo     reads, in Init, the attributes named by the string attribute "read" -- "kind:name" items separated
//            by ';', kind one of has b i f s iv fv i2 f2 -- and F copies what it read into its int64 output
//            (pass out_shape=(4096,)), as a stream of 64-bit words, one record per item:
//              has: 1 or 0          b: 0/1              i: the value       f: the float widened to double (bits)
//              s: byte count, then the bytes packed 8 per word
//              iv: count, values    fv: count, doubles  i2/f2: rows, then per row its length and its values
//            Reading in Init (not F) means a stale Init would show up as stale output.
//   ScaleAdd out = alpha * x + y for float32 x, y; alpha is the float attribute "alpha", read in Init.
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "custom_aot_extra.h"

namespace {

constexpr int64_t kEchoWords = 4096;

class EchoData : public AotKernelData {
 public:
  std::vector<int64_t> words;
};

class ScaleData : public AotKernelData {
 public:
  float alpha = 0.0f;
};

int64_t DoubleBits(double d) {
  int64_t w;
  std::memcpy(&w, &d, sizeof w);
  return w;
}

void Echo1(AotExtra *extra, const std::string &kind, const std::string &name, std::vector<int64_t> *w) {
  if (kind == "has") {
    w->push_back(extra->HasAttr(name) ? 1 : 0);
  } else if (kind == "b") {
    w->push_back(extra->Attr<bool>(name) ? 1 : 0);
  } else if (kind == "i") {
    w->push_back(extra->Attr<int64_t>(name));
  } else if (kind == "f") {
    w->push_back(DoubleBits(extra->Attr<float>(name)));
  } else if (kind == "s") {
    std::string s = extra->Attr<std::string>(name);
    w->push_back(static_cast<int64_t>(s.size()));
    for (size_t at = 0; at < s.size(); at += 8) {
      int64_t word = 0;
      std::memcpy(&word, s.data() + at, s.size() - at < 8 ? s.size() - at : 8);
      w->push_back(word);
    }
  } else if (kind == "iv") {
    std::vector<int64_t> v = extra->Attr<std::vector<int64_t>>(name);
    w->push_back(static_cast<int64_t>(v.size()));
    for (int64_t x : v) w->push_back(x);
  } else if (kind == "fv") {
    std::vector<float> v = extra->Attr<std::vector<float>>(name);
    w->push_back(static_cast<int64_t>(v.size()));
    for (float x : v) w->push_back(DoubleBits(x));
  } else if (kind == "i2") {
    std::vector<std::vector<int64_t>> v = extra->Attr<std::vector<std::vector<int64_t>>>(name);
    w->push_back(static_cast<int64_t>(v.size()));
    for (const auto &row : v) {
      w->push_back(static_cast<int64_t>(row.size()));
      for (int64_t x : row) w->push_back(x);
    }
  } else if (kind == "f2") {
    std::vector<std::vector<float>> v = extra->Attr<std::vector<std::vector<float>>>(name);
    w->push_back(static_cast<int64_t>(v.size()));
    for (const auto &row : v) {
      w->push_back(static_cast<int64_t>(row.size()));
      for (float x : row) w->push_back(DoubleBits(x));
    }
  } else {
    throw std::invalid_argument("Echo: unknown kind '" + kind + "'");
  }
}

}  // namespace

extern "C" int EchoInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  auto *data = new EchoData;
  extra->SetKernelData(data);
  const std::string spec = extra->Attr<std::string>("read");
  size_t at = 0;
  while (at < spec.size()) {
    size_t end = spec.find(';', at);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(at, end - at);
    const size_t colon = item.find(':');
    if (colon == std::string::npos) throw std::invalid_argument("Echo: bad item '" + item + "'");
    Echo1(extra, item.substr(0, colon), item.substr(colon + 1), &data->words);
    at = end + 1;
  }
  if (static_cast<int64_t>(data->words.size()) > kEchoWords) return 9;
  return 0;
}

extern "C" int Echo(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                    void *extra_void) {
  auto *data = static_cast<EchoData *>(static_cast<AotExtra *>(extra_void)->KernelData());
  const int out = nparam - 1;
  if (std::strcmp(dtypes[out], "int64") != 0 || ndims[out] != 1 || shapes[out][0] < kEchoWords) return 1;
  int64_t *o = static_cast<int64_t *>(params[out]);
  for (int64_t i = 0; i < kEchoWords; ++i) o[i] = -1;
  std::memcpy(o, data->words.data(), data->words.size() * sizeof(int64_t));
  return 0;
}

extern "C" int ScaleAddInit(int *ndims, int64_t **shapes, const char **dtypes, AotExtra *extra) {
  auto *data = new ScaleData;
  extra->SetKernelData(data);
  data->alpha = extra->Attr<float>("alpha");
  return 0;
}

extern "C" int ScaleAdd(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                        void *extra_void) {
  if (nparam != 3) return 1;
  for (int k = 0; k < 3; ++k) {
    if (std::strcmp(dtypes[k], "float32") != 0) return 2;
  }
  const float alpha = static_cast<ScaleData *>(static_cast<AotExtra *>(extra_void)->KernelData())->alpha;
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];
  const float *x = static_cast<const float *>(params[0]);
  const float *y = static_cast<const float *>(params[1]);
  float *o = static_cast<float *>(params[2]);
  for (int64_t i = 0; i < n; ++i) o[i] = alpha * x[i] + y[i];
  return 0;
}
