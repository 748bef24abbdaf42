#pragma once
// How many compute threads the CPU backend starts when the user leaves it to us
// (BackendOptions::n_threads = 0).
//
// Every usable CPU, unless the machine cannot run that many threads at once. On the lent
// 64-vCPU VMs (bench/RESULTS.md, session 36) 64 threads decoded 1.6-6x slower than 32 and
// processed prompts 2x slower: the host took CPU time from the guest (steal) on 64 threads and
// hardly on 32, and a fork-join waits for its slowest thread, so a thread preempted holding a
// task holds up the region. The machine does not say so (64 CPUs in /proc/cpuinfo, one NUMA
// node), so the backend measures it: fork-join regions of fixed work on every thread, then on
// fewer.

#include <string>
#include <vector>

#include "model/cpu/cpu_count.hpp"  // usable_cpus

namespace brigade::model::cpu {

// One measured thread count: fixed-work regions completed per second.
struct ThreadCountSample {
    int threads = 0;
    double regions_per_s = 0.0;
};

struct ThreadCountChoice {
    int threads = 0;
    // Empty where nothing was measured (few hardware threads).
    std::vector<ThreadCountSample> samples;
};

// What the choice was and why, for a node's log: "32 of 64 CPUs: ...".
std::string describe(const ThreadCountChoice& choice, int usable);

// A warning where a thread count given by the user exceeds the usable CPUs (a container's
// quota or cpuset below the host's cores is the usual way to get there); "" otherwise. More
// threads than CPUs take turns, and every fork-join waits for the last of them.
std::string oversubscription_warning(int threads, int usable);

// Below this many hardware threads every one is used without a measurement: the lent 16- and
// 32-vCPU VMs decoded fastest on all of them (sessions 22 and 23).
inline constexpr int kThreadCountProbeFrom = 33;

// The decision of choose_thread_count on its measurements (samples[0]: every thread): the
// fastest count where it completed regions more than 25% faster than every thread, else every
// thread. (A count below all leaves cores idle in prompt processing wherever the machine could
// have run them, so it must win clearly.)
int pick_thread_count(const std::vector<ThreadCountSample>& samples);

// The probe's measurements on `hardware_threads` (whatever their number): all, three quarters
// and half of them, the median of three rounds each, all first.
std::vector<ThreadCountSample> measure_thread_counts(int hardware_threads);

// The thread count for `hardware_threads`: all of them, or (from kThreadCountProbeFrom) the
// count among all, three quarters and half whose regions completed fastest, if it beat all of
// them by a clear margin. The measurement takes 0.8-2 s on the lent 64-vCPU VM, where 64
// threads run slowly; a node makes it once.
ThreadCountChoice choose_thread_count(int hardware_threads);

// choose_thread_count(usable_cpus()), measured on the first call and the same for the rest of
// the process (a constant once made: every backend a process creates with n_threads = 0, the
// stages of a node's re-plans and the test suites' hundreds of backends, takes it without
// measuring again).
const ThreadCountChoice& default_thread_count();

// Regions per second of `regions` fork-joins on `threads` threads, each region `tasks` tasks
// of about `task_ns` of arithmetic (the probe behind choose_thread_count; benches print it).
double measure_region_rate(int threads, int regions, int tasks, int task_ns);

}  // namespace brigade::model::cpu
