// Lab 09's public tests: the checkpoint writer (09.1), read back with the kit's own reader of the
// format in lab09.h, over and over, failing over an existing checkpoint, from another working
// directory; the checkpoint reader (09.2), given files the test writes itself, resuming a job that
// draws random numbers; the cost meter and the budget alarm (09.3). Each exercise's tests call only
// its own code.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "lab09.h"

#include "ddplab/deepfm.h"
#include "scratch_dir.h"

namespace {

namespace fs = std::filesystem;
using lab09::Checkpoint;
using lab09::CheckpointError;

/// A small DeepFM (the real tables, narrow layers) and its Adam.
struct Trainer {
  explicit Trainer(uint64_t seed, int64_t dim = 4) {
    torch::manual_seed(seed);
    ddplab::DeepFMOptions o;
    o.embedding_dim = dim;
    o.hidden = 16;
    o.layers = 1;
    model = ddplab::DeepFM(o);
    adam = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-2));
  }
  /// One Adam step on a fixed batch of 8 (the same for every Trainer).
  void step() {
    torch::manual_seed(123);
    const auto dense = torch::rand({8, 13});
    const auto rows = torch::randint(0, 1000, {8, 26}, torch::kInt64);
    const auto labels = torch::randint(0, 2, {8}).to(torch::kFloat32);
    adam->zero_grad();
    torch::binary_cross_entropy_with_logits(model->forward(dense, rows), labels).backward();
    adam->step();
  }
  /// One Adam step on a fixed batch of 8 with dropout on its dense features, drawn from the default
  /// generator as the template's --input-dropout draws it: the step depends on the generator's
  /// state, and moves it on.
  void noisy_step() {
    at::Generator own = at::make_generator<at::CPUGeneratorImpl>(123);  // the batch: not the job's generator
    const auto dense = torch::rand({8, 13}, own);
    const auto rows = torch::randint(0, 1000, {8, 26}, own, torch::kInt64);
    const auto labels = torch::randint(0, 2, {8}, own).to(torch::kFloat32);
    const auto keep = torch::empty({8, 13}).bernoulli_(0.5);
    adam->zero_grad();
    torch::binary_cross_entropy_with_logits(model->forward(dense * keep * 2, rows), labels).backward();
    adam->step();
  }
  std::string digest() const { return lab09::tensors_digest(lab09::model_tensors(*model)); }
  ddplab::DeepFM model{nullptr};
  std::unique_ptr<torch::optim::Adam> adam;
};

Checkpoint header_for(const Trainer& t, int world = 2) {
  Checkpoint c;
  c.job.model = lab09::model_signature(*t.model);
  c.job.world_size = world;
  c.job.batch = 256;
  c.job.accumulate = 2;
  c.job.seed = 7;
  c.job.train_samples = 4096;
  c.at.step = 5;
  c.at.epoch = 1;
  c.at.step_in_epoch = 1;
  c.at.samples = 5 * 1024;
  c.at.device_seconds = 12.5;
  c.at.loss_scale = 1024;  // an fp16 job's scaler: its scale and clean steps in a row are part of the position
  c.at.scale_growth_tracker = 7;
  c.rng = lab09::rng_state();
  return c;
}

/// Adam's state (every moment and step count) as bytes, to compare before and after.
std::string optimizer_bytes(torch::optim::Optimizer& opt) {
  torch::serialize::OutputArchive a;
  opt.save(a);
  std::ostringstream out;
  a.save_to(out);
  return out.str();
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

/// The regular files in `dir`, by name.
std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

/// A folder of /dev/shm of this test's own, removed with it, on another file system than `other`
/// (the test stops if it is not).
class ShmFolder {
 public:
  explicit ShmFolder(const fs::path& other)
      : dir_(fs::path("/dev/shm") / fmt::format("ddplab-lab09-test-{}", ::getpid())) {
    fs::create_directories(dir_);
    struct stat a {
    }, b{};
    ok_ = ::stat(dir_.c_str(), &a) == 0 && ::stat(other.c_str(), &b) == 0 && a.st_dev != b.st_dev;
  }
  ~ShmFolder() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  ShmFolder(const ShmFolder&) = delete;
  ShmFolder& operator=(const ShmFolder&) = delete;
  const fs::path& dir() const { return dir_; }
  bool on_another_file_system() const { return ok_; }
  bool empty() const { return !fs::exists(dir_) || fs::is_empty(dir_); }

 private:
  fs::path dir_;
  bool ok_ = false;
};

/// A folder of its own under the test's temporary directory, removed at the end.
class Scratch : public ddplab::testing::ScratchTest {};

// ---- 09.1 ----

/// The kit's reader of the format lab09.h describes (what a 09.1 file must hold).
nlohmann::json read_header(const std::string& path, torch::nn::Module* model, torch::optim::Optimizer* opt,
                           torch::Tensor* rng) {
  torch::serialize::InputArchive a;
  a.load_from(path);
  c10::IValue h;
  a.read("header", h);
  if (model) {
    torch::serialize::InputArchive m;
    a.read("model", m);
    model->load(m);
  }
  if (opt) {
    torch::serialize::InputArchive o;
    a.read("optimizer", o);
    opt->load(o);
  }
  if (rng) a.read("rng", *rng);
  return nlohmann::json::parse(h.toStringRef());
}

using Lab09Save = Scratch;

/// Saves `a`'s checkpoint to `file`: what the save threw, or "" when it did not.
std::string save_error(const fs::path& file, Trainer& a) {
  try {
    lab09::save_checkpoint(file, header_for(a), *a.model, *a.adam);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST_F(Lab09Save, HoldsTheModelTheOptimizerAndTheHeaderOfTheFormat) {
  Trainer a(1);
  a.step();
  a.step();
  const Checkpoint c = header_for(a);
  const std::string file = path("step-00000005.pt");
  lab09::save_checkpoint(file, c, *a.model, *a.adam);

  Trainer b(2);  // other weights, no optimizer state
  torch::Tensor rng;
  const auto h = read_header(file, b.model.ptr().get(), b.adam.get(), &rng);
  EXPECT_EQ(h.at("format"), lab09::kCheckpointFormat);
  EXPECT_EQ(h.at("at").get<lab09::Position>(), c.at) << h.dump();
  EXPECT_EQ(h.at("job").get<lab09::JobIdentity>().world_size, 2) << h.dump();
  EXPECT_EQ(h.at("job").get<lab09::JobIdentity>().model, c.job.model);
  EXPECT_EQ(h.at("digest"), a.digest()) << "the header's digest is tensors_digest(model_tensors(model))";
  EXPECT_EQ(b.digest(), a.digest()) << "the saved model is not the one given";
  ASSERT_TRUE(rng.defined());
  EXPECT_TRUE(torch::equal(rng, c.rng)) << "\"rng\" must be the checkpoint's generator state";
  // The optimizer's state (Adam's moments and step count) came along: the next step is the same.
  a.step();
  b.step();
  EXPECT_EQ(b.digest(), a.digest()) << "after one more step the models differ: the optimizer state was not saved";
}

TEST_F(Lab09Save, AReaderSeesTheOldFileOrTheNewOneNeverPartOfOne) {
  Trainer a(1, 16);  // the full-width tables: a file of ~21 MB takes a while to write
  const std::string file = path("step-00000001.pt");
  Checkpoint c = header_for(a);
  lab09::save_checkpoint(file, c, *a.model, *a.adam);
  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, partial{0};
  std::string first_error;
  std::thread reader([&] {
    while (!done.load()) {
      try {
        (void)read_header(file, nullptr, nullptr, nullptr);
      } catch (const std::exception& e) {
        if (partial.fetch_add(1) == 0) first_error = e.what();
      }
      reads.fetch_add(1);
    }
  });
  for (int i = 0; i < 12; ++i) {
    c.at.step = i;
    lab09::save_checkpoint(file, c, *a.model, *a.adam);
  }
  done = true;
  reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(partial.load(), 0) << partial.load() << " of " << reads.load()
                               << " reads of the checkpoint while it was being rewritten failed; the first: "
                               << first_error.substr(0, first_error.find('\n'))
                               << " — write to a temporary file and rename it over the checkpoint";
}

TEST_F(Lab09Save, LeavesNoTemporaryFileBehind) {
  Trainer a(1);
  for (int i = 0; i < 3; ++i) lab09::save_checkpoint(path("ckpt.pt"), header_for(a), *a.model, *a.adam);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(scratch_.dir())) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"ckpt.pt"}) << fmt::format("{}", fmt::join(names, ", "));
}

TEST_F(Lab09Save, WorksWhenTheTemporaryFolderIsAnotherFileSystem) {
  // On most machines /tmp is a tmpfs or another disk: a file made in TMPDIR cannot be renamed into
  // the checkpoint's folder (EXDEV). Here TMPDIR is a folder of /dev/shm, the checkpoint's folder
  // is elsewhere; a save that goes through TMPDIR fails as it would on a cluster.
  const ShmFolder shm(scratch_.dir());
  ASSERT_TRUE(shm.on_another_file_system())
      << "this test needs /dev/shm on another file system than " << scratch_.dir();
  const char* was = std::getenv("TMPDIR");
  const std::string saved = was ? was : "";
  ::setenv("TMPDIR", shm.dir().c_str(), 1);
  Trainer a(1);
  const std::string error = save_error(path("ckpt.pt"), a);
  if (was) {
    ::setenv("TMPDIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
  const bool left = !shm.empty();
  EXPECT_EQ(error, "") << "write the temporary file in the checkpoint's own folder: rename(2) does not cross file "
                          "systems";
  EXPECT_TRUE(fs::exists(path("ckpt.pt")));
  EXPECT_FALSE(left) << "a temporary file was left in TMPDIR";
}

TEST_F(Lab09Save, WorksWhenTheWorkingDirectoryIsAnotherFileSystem) {
  // A job started from the user's home (NFS) writes its checkpoints to a scratch disk: a temporary
  // file named without its folder lands in the working directory, and rename(2) cannot bring it over.
  const ShmFolder shm(scratch_.dir());
  ASSERT_TRUE(shm.on_another_file_system())
      << "this test needs /dev/shm on another file system than " << scratch_.dir();
  const fs::path was = fs::current_path();
  fs::current_path(shm.dir());
  Trainer a(1);
  const std::string error = save_error(path("ckpt.pt"), a);
  fs::current_path(was);
  EXPECT_EQ(error, "") << "with the working directory on another file system the save failed: the temporary file "
                          "belongs in the checkpoint's own folder (a path relative to nothing is relative to the "
                          "working directory)";
  EXPECT_TRUE(fs::exists(path("ckpt.pt")));
  EXPECT_TRUE(shm.empty()) << "a file was left in the working directory";
}

TEST_F(Lab09Save, ChangesNothingOfTheJob) {
  // Saved again and again, as the template does every few steps: the job's model, Adam's state and
  // its random number generator (the template's dropout draws from it) are as they were.
  Trainer a(1);
  a.step();
  torch::manual_seed(5);
  const torch::Tensor rng = lab09::rng_state().clone();
  const std::string digest = a.digest(), adam = optimizer_bytes(*a.adam);
  for (int i = 0; i < 3; ++i) {
    lab09::save_checkpoint(path(fmt::format("step-{:08d}.pt", i)), header_for(a), *a.model, *a.adam);
  }
  EXPECT_TRUE(torch::equal(lab09::rng_state(), rng))
      << "saving a checkpoint drew from the job's random number generator: the straight job's next random numbers "
         "are no longer the ones a job resumed from that checkpoint draws";
  EXPECT_EQ(a.digest(), digest) << "saving changed the model";
  EXPECT_TRUE(optimizer_bytes(*a.adam) == adam) << "saving changed the optimizer's state";
}

TEST_F(Lab09Save, AFailedSaveLeavesTheCheckpointItReplaces) {
  // The next checkpoint of the same name cannot be written: here no file can be opened any more
  // (every file descriptor the process may have is taken: EMFILE), as when a job holds too many
  // files. The save throws naming the path, and the checkpoint it was to replace is still there,
  // byte for byte, with no temporary file beside it.
  Trainer a(1);
  const std::string file = path("step-00000004.pt");
  lab09::save_checkpoint(file, header_for(a), *a.model, *a.adam);
  const std::string before = file_bytes(file);
  a.step();
  struct rlimit was {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &was), 0);
  const int lowest_free = ::open("/dev/null", O_RDONLY);  // every descriptor below it is taken
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  struct rlimit none_left = was;
  none_left.rlim_cur = static_cast<rlim_t>(lowest_free);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &none_left), 0);
  std::string error;
  bool ddplab_error = false;
  try {
    lab09::save_checkpoint(file, header_for(a), *a.model, *a.adam);
  } catch (const ddplab::Error& e) {
    error = e.what();
    ddplab_error = true;
  } catch (const std::exception& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_NOFILE, &was);
  ASSERT_NE(error, "") << "a save that could not create its file did not throw";
  EXPECT_TRUE(ddplab_error) << "not a ddplab::Error: " << error.substr(0, error.find('\n'));
  EXPECT_NE(error.find(file), std::string::npos) << "the message must name the checkpoint: " << error;
  ASSERT_TRUE(fs::exists(file)) << "the failed save removed the checkpoint it was to replace: the job has nothing "
                                   "to resume from";
  EXPECT_TRUE(file_bytes(file) == before) << "the failed save changed the checkpoint it was to replace";
  EXPECT_EQ(files_in(scratch_.dir()), std::vector<std::string>{"step-00000004.pt"})
      << "a failed save left a file behind";
}

TEST_F(Lab09Save, AFailureNamesThePathAndLeavesThePreviousFile) {
  Trainer a(1);
  const std::string missing = path("no-such-folder/step-00000001.pt");
  try {
    lab09::save_checkpoint(missing, header_for(a), *a.model, *a.adam);
    FAIL() << "saving into a folder that does not exist must throw";
  } catch (const ddplab::Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  // A folder where the checkpoint's name is taken by a folder: the rename fails, the old file stays.
  const std::string file = path("ckpt.pt");
  lab09::save_checkpoint(file, header_for(a), *a.model, *a.adam);
  const auto size = fs::file_size(file);
  fs::create_directories(path("blocked.pt/inside"));
  EXPECT_THROW(lab09::save_checkpoint(path("blocked.pt"), header_for(a), *a.model, *a.adam), ddplab::Error);
  EXPECT_EQ(fs::file_size(file), size);
  int files = 0;
  for (const auto& e : fs::directory_iterator(scratch_.dir())) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1) << "a failed save left a temporary file";
}

// ---- 09.2 ----

/// Writes a checkpoint of the format in lab09.h the plain way (the test's own writer), with
/// `digest` in the header (default: the model's), and without the optimizer's state if asked.
void write_checkpoint(const std::string& path, const Checkpoint& c, const Trainer& t, std::string digest = "",
                      bool with_optimizer = true) {
  torch::serialize::OutputArchive a, m, o;
  const nlohmann::json h = {{"format", lab09::kCheckpointFormat},
                            {"job", c.job},
                            {"at", c.at},
                            {"digest", digest.empty() ? t.digest() : digest}};
  a.write("header", c10::IValue(h.dump()));
  t.model->save(m);
  a.write("model", m);
  if (with_optimizer) {
    t.adam->save(o);
    a.write("optimizer", o);
  }
  a.write("rng", c.rng);
  a.save_to(path);
}

using Lab09Load = Scratch;

TEST_F(Lab09Load, RestoresTheModelTheOptimizerAndThePosition) {
  Trainer a(1);
  a.step();
  torch::manual_seed(99);
  const Checkpoint c = header_for(a);
  write_checkpoint(path("c.pt"), c, a);
  Trainer b(2);
  const Checkpoint got = lab09::load_checkpoint(path("c.pt"), c.job, *b.model, *b.adam);
  EXPECT_EQ(got.at, c.at) << "the position returned is not the header's (every field, the loss scaler's too): "
                          << nlohmann::json(got.at).dump() << " instead of " << nlohmann::json(c.at).dump();
  EXPECT_EQ(got.digest, a.digest());
  EXPECT_EQ(b.digest(), a.digest()) << "the model's tensors were not restored";
  a.step();
  b.step();
  EXPECT_EQ(b.digest(), a.digest()) << "the next step differs: the optimizer's state was not restored";
}

TEST_F(Lab09Load, ResumesAJobThatDrawsRandomNumbers) {
  // A job with dropout: checkpointed after two steps, it takes three more; a restart (another
  // process: its generator elsewhere) loads the checkpoint, sets the generator state it returns, as
  // the template does, and takes the same three steps. It must end where the job ended.
  Trainer a(1);
  a.noisy_step();
  a.noisy_step();
  const Checkpoint c = header_for(a);  // its generator state: the job's, now
  write_checkpoint(path("c.pt"), c, a);
  for (int i = 0; i < 3; ++i) a.noisy_step();
  Trainer b(2);
  const Checkpoint got = lab09::load_checkpoint(path("c.pt"), c.job, *b.model, *b.adam);
  ASSERT_TRUE(got.rng.defined()) << "Checkpoint::rng is an undefined tensor: return the generator state the "
                                    "checkpoint holds (\"rng\"); the template sets it";
  EXPECT_TRUE(torch::equal(got.rng, c.rng)) << "the generator state returned is not the one the checkpoint holds";
  lab09::set_rng_state(got.rng);
  for (int i = 0; i < 3; ++i) b.noisy_step();
  EXPECT_EQ(b.digest(), a.digest()) << "three steps with dropout after the resume end elsewhere than the job's: the "
                                       "resumed job did not draw the job's random numbers";
}

/// Expects load_checkpoint to refuse `file` with a message naming it and containing `what`, and to
/// leave `t`'s model and optimizer as they were. `t` has taken a step first, so that its Adam holds
/// state a careless load could overwrite before it refuses.
void expect_refused(const std::string& file, const lab09::JobIdentity& job, Trainer& t,
                    const std::vector<std::string>& what) {
  t.step();
  const std::string before = t.digest();
  const std::string adam_before = optimizer_bytes(*t.adam);
  try {
    (void)lab09::load_checkpoint(file, job, *t.model, *t.adam);
    ADD_FAILURE() << file << " was loaded; it must be refused";
  } catch (const CheckpointError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(file), std::string::npos) << "the message must name the file: " << m;
    for (const auto& w : what) EXPECT_NE(m.find(w), std::string::npos) << "expected '" << w << "' in: " << m;
  }
  EXPECT_EQ(t.digest(), before) << "a refused checkpoint changed the model";
  EXPECT_TRUE(optimizer_bytes(*t.adam) == adam_before) << "a refused checkpoint changed the optimizer's state";
}

TEST_F(Lab09Load, RefusesACheckpointOfAnotherWorldSize) {
  Trainer a(1);
  a.step();  // the file holds Adam state, which a careless load could put into b before refusing
  write_checkpoint(path("c.pt"), header_for(a, 2), a);
  Trainer b(2);
  auto job = header_for(b, 4).job;
  expect_refused(path("c.pt"), job, b, {"world size", "2", "4"});
}

TEST_F(Lab09Load, RefusesACheckpointOfAnotherModelNamingTheTensor) {
  Trainer a(1, 4);
  a.step();  // the file holds Adam state, which a careless load could put into b before refusing
  write_checkpoint(path("c.pt"), header_for(a), a);
  Trainer b(2, 8);
  expect_refused(path("c.pt"), header_for(b).job, b, {"embedding.weight", "4]", "8]"});
}

TEST_F(Lab09Load, RefusesOtherBatchSeedOrData) {
  Trainer a(1);
  a.step();  // the file holds Adam state, which a careless load could put into b before refusing
  write_checkpoint(path("c.pt"), header_for(a), a);
  Trainer b(2);
  auto job = header_for(b).job;
  job.batch = 512;
  expect_refused(path("c.pt"), job, b, {"256", "512"});
  job = header_for(b).job;
  job.seed = 8;
  expect_refused(path("c.pt"), job, b, {"seed"});
  job = header_for(b).job;
  job.train_samples = 8192;
  expect_refused(path("c.pt"), job, b, {"4096", "8192"});
  job = header_for(b).job;
  job.accumulate = 4;  // the same batch a rank, 4 micro-batches a step instead of 2: another step
  expect_refused(path("c.pt"), job, b, {"2", "4"});
}

TEST_F(Lab09Load, RefusesATruncatedFile) {
  Trainer a(1);
  a.step();  // the file holds Adam state, which a careless load could put into b before refusing
  write_checkpoint(path("c.pt"), header_for(a), a);
  fs::resize_file(path("c.pt"), fs::file_size(path("c.pt")) / 2);
  Trainer b(2);
  expect_refused(path("c.pt"), header_for(b).job, b, {});
}

TEST_F(Lab09Load, RefusesTensorsThatDoNotMatchTheirDigest) {
  Trainer a(1);
  a.step();  // the file holds Adam state, which a careless load could put into b before refusing
  write_checkpoint(path("c.pt"), header_for(a), a, "0123456789abcdef");  // as if a byte of a tensor flipped
  Trainer b(2);
  expect_refused(path("c.pt"), header_for(b).job, b, {"corrupt"});
}

TEST_F(Lab09Load, RefusesACheckpointWithoutOptimizerStateChangingNothing) {
  // The header, the model (with its digest) and the generator are there, Adam's state is not: the
  // refusal comes after the model's tensors were read, and must put them back.
  Trainer a(1);
  a.step();
  write_checkpoint(path("c.pt"), header_for(a), a, "", false);
  Trainer b(2);
  expect_refused(path("c.pt"), header_for(b).job, b, {});
}

TEST_F(Lab09Load, RefusesAMissingFileOrOneThatIsNotACheckpoint) {
  Trainer b(2);
  expect_refused(path("nothing-here.pt"), header_for(b).job, b, {});
  std::ofstream(path("notes.pt")) << "not a checkpoint\n";
  expect_refused(path("notes.pt"), header_for(b).job, b, {});
}

// ---- 09.3 ----

lab09::Price p3() {
  lab09::Price p;
  p.instance = "p3.16xlarge";
  p.devices = 8;
  p.usd_per_hour = 24.48;
  return p;
}

TEST(Lab09Meter, PricesDeviceHoursAndProjectsAtTheJobsOwnRate) {
  lab09::Position at;
  at.device_seconds = 8 * 3600;  // one hour of 8 devices
  at.samples = 1'000'000;
  const lab09::Spend s = lab09::meter(p3(), at, 2'000'000, 2);
  EXPECT_DOUBLE_EQ(s.device_hours, 8);
  EXPECT_DOUBLE_EQ(s.usd, 24.48) << "8 device-hours at 24.48 / 8 a device-hour";
  EXPECT_DOUBLE_EQ(s.usd_per_million_samples, 24.48);
  EXPECT_DOUBLE_EQ(s.usd_per_epoch, 48.96) << "2,000,000 samples at the rate so far";
  EXPECT_DOUBLE_EQ(s.usd_to_finish, 97.92) << "the 4,000,000 samples of 2 epochs";
}

TEST(Lab09Meter, ProjectsNothingBeforeTheFirstSampleAndNothingPastTheEnd) {
  lab09::Position at;
  at.device_seconds = 30;
  const lab09::Spend s = lab09::meter(p3(), at, 1000, 3);
  EXPECT_DOUBLE_EQ(s.usd, 30.0 / 3600 * 24.48 / 8);
  EXPECT_EQ(s.usd_per_epoch, 0);
  EXPECT_EQ(s.usd_to_finish, 0);
  EXPECT_EQ(s.usd_per_million_samples, 0);
  at.samples = 4000;  // more than 3 epochs of 1000 (a resumed job that trained on)
  const lab09::Spend t = lab09::meter(p3(), at, 1000, 3);
  EXPECT_DOUBLE_EQ(t.usd_to_finish, t.usd) << "nothing is left to train";
}

TEST(Lab09Meter, PricesAnyNumberOfSamples) {
  // Not round figures: 16,384 samples (2 epochs of 8,192) in 37.5 device-seconds, 3 epochs planned.
  lab09::Position at;
  at.device_seconds = 37.5;
  at.samples = 16384;
  const lab09::Spend s = lab09::meter(p3(), at, 8192, 3);
  const double usd = 37.5 / 3600 * 24.48 / 8;
  const auto near = [](double got, double want) { return std::abs(got - want) <= 1e-12 * std::abs(want); };
  EXPECT_TRUE(near(s.usd, usd)) << s.usd << " instead of " << usd;
  EXPECT_TRUE(near(s.usd_per_million_samples, usd / 16384 * 1e6))
      << s.usd_per_million_samples << " instead of " << usd / 16384 * 1e6
      << ": spent / samples x 10^6, in floating point (in integers 1,000,000 / 16,384 is 61, not 61.04)";
  EXPECT_TRUE(near(s.usd_per_epoch, usd / 2)) << s.usd_per_epoch << " instead of " << usd / 2;
  EXPECT_TRUE(near(s.usd_to_finish, usd * 1.5)) << s.usd_to_finish << " instead of " << usd * 1.5;
}

TEST(Lab09Budget, StopsBeforeTheNextStepAndTheLastCheckpointWouldPassIt) {
  lab09::Spend now;
  now.usd = 9.0;
  EXPECT_FALSE(lab09::over_budget(10.0, now, 0.5, 0.25)) << "9 + 0.5 + 0.25 is within 10";
  EXPECT_TRUE(lab09::over_budget(10.0, now, 0.5, 0.75)) << "9 + 0.5 + 0.75 passes 10";
  EXPECT_TRUE(lab09::over_budget(10.0, now, 1.5, 0.0)) << "the next step alone passes it";
  EXPECT_FALSE(lab09::over_budget(10.0, now, 1.0, 0.0)) << "reaching the budget exactly is within it";
  now.usd = 1e6;
  EXPECT_FALSE(lab09::over_budget(0.0, now, 1.0, 1.0)) << "a budget of 0 means none";
}

}  // namespace
