// Whether the machine can give a timing measurement the cores it needs right now. A shared VM
// loses a core for minutes at a time (to another tenant or the hypervisor): measured then, lab
// 08's reference prefetching loader hides none of its parsing and lab 09's reference gains nothing
// from a second rank, and three attempts a few seconds apart all land in the same spell. Before a
// failed timing check is measured again, the harness waits for the machine to be quiet.
#pragma once

#include <functional>
#include <string>

namespace ddplab::grader {

/// How many of `threads` cores a CPU-bound job gets now: `threads` threads spinning the same
/// fixed work together, against one alone, the median of three tries (2.0 of 2 on an idle
/// machine; about 1.0 when another process or the hypervisor holds one of two cores). Takes
/// about 0.1 s.
double parallel_capacity(int threads);

/// The share of the runs' cores the machine must give before a timing figure is measured (a
/// failed timing check again, or a calibration's measurement): 1.6 of 2, where a core held
/// elsewhere measures ~1.0.
inline constexpr double kQuietShare = 0.8;

/// What waiting for a quiet machine found.
struct QuietWait {
  double capacity = 0;  ///< the last probe's cores
  double waited_s = 0;  ///< seconds spent waiting (0: quiet at once)
  bool quiet = false;   ///< capacity reached `share` x `threads`
};

/// Probes (`probe(threads)`) until the machine gives at least `share` x `threads` cores, sleeping
/// `pause_s` between probes (`sleep`), for at most `max_wait_s`; says what it waits for once.
/// The probe and the sleep are parameters so the rule can be tested without a busy machine.
/// The wait a timing measurement takes, on this machine: `threads` capped to its usable cores
/// (nothing to wait for below 2: quiet at once), probed with parallel_capacity every 5 s until
/// kQuietShare of them are free, for at most `max_wait_s`.
QuietWait wait_for_quiet_cores(int threads, double max_wait_s, const std::function<void(const std::string&)>& say);

QuietWait wait_for_quiet_machine(int threads, double share, double max_wait_s, double pause_s,
                                 const std::function<double(int)>& probe, const std::function<void(double)>& sleep,
                                 const std::function<void(const std::string&)>& say);

}  // namespace ddplab::grader
