// What a Stepper's step takes and gives, in plain C++ (no tensor library): the tokens of each
// slot, and the logits of each slot's last fed token, in host memory (the native steppers) or
// on a device (a TorchScript forward on CUDA: TensorLogits). The Scheduler and the Sampler work
// on these alone, so the native runtime's serving path needs no libtorch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace tsn {

// One step's input: slot s feeds tokens[s][0 .. lengths[s]) at positions positions[s] ..
// (lengths[s] == 0: the slot sits the step out). Row-major, `width` tokens a slot.
struct StepBatch {
  StepBatch(int64_t slots, int64_t width)
      : slots(slots), width(width), tokens(static_cast<size_t>(slots * width)), positions(slots), lengths(slots) {}
  int64_t slots, width;
  std::vector<int64_t> tokens, positions, lengths;
  int64_t& token(int64_t slot, int64_t t) { return tokens[static_cast<size_t>(slot * width + t)]; }
  int64_t token(int64_t slot, int64_t t) const { return tokens[static_cast<size_t>(slot * width + t)]; }
};

// Logits [rows, vocab] of one step, float32.
class Logits {
 public:
  Logits(int64_t rows, int64_t vocab) : rows_(rows), vocab_(vocab) {}
  virtual ~Logits() = default;
  Logits(const Logits&) = delete;
  Logits& operator=(const Logits&) = delete;

  int64_t rows() const { return rows_; }
  int64_t vocab() const { return vocab_; }
  // The rows in host memory, row-major; null where they live on a device.
  virtual const float* host() const = 0;
  // Copies of the rows listed, [n][vocab] in host memory (from a device: one transfer).
  virtual std::vector<float> HostRows(const std::vector<int64_t>& rows) const;

  // One draw on a device: logits row `row`; greedy (its argmax) where temperature is 0, else
  // softmax at `temperature` over the tokens at or above the row's k-th largest logit (topK 0:
  // all), and the first token whose cumulative probability reaches `uniform` (in (0, 1]) of
  // the total.
  struct Draw {
    int64_t row;
    double temperature;
    int64_t topK;
    double uniform;
  };
  // Logits on a device: the draws made there with one transfer back; throws CodedError
  // (ERR_INFERENCE) where the logits hold a NaN. Host logits are sampled on the CPU instead
  // (Sampler.h), and do not implement this.
  virtual std::vector<int64_t> DrawOnDevice(const std::vector<Draw>& draws) const;

 private:
  int64_t rows_, vocab_;
};

// Logits held in host memory (the native steppers', and a held row's).
class HostLogits final : public Logits {
 public:
  HostLogits(int64_t rows, int64_t vocab) : Logits(rows, vocab), data_(static_cast<size_t>(rows * vocab)) {}
  HostLogits(std::vector<float> data, int64_t vocab)
      : Logits(static_cast<int64_t>(data.size()) / vocab, vocab), data_(std::move(data)) {}
  const float* host() const override { return data_.data(); }
  float* data() { return data_.data(); }

 private:
  std::vector<float> data_;
};

}  // namespace tsn
