// boost_spawn — the peer of core_spawn: nanoseconds per create + run +
// exit of a Boost.Context fiber that returns at once.
//
//   boost_spawn warm N REPS   create and run fibers one by one; stacks come
//                             from pooled_fixedsize_stack (64 KiB, a memory
//                             pool, no guard page)
//   boost_spawn cold N REPS   create N fibers, then run them all; each stack
//                             is protected_fixedsize_stack (64 KiB, its own
//                             mmap with an mprotect guard page)
//
// Prints one figure (ns per fiber) per repetition, one per line.
#include <boost/context/fiber.hpp>
#include <boost/context/pooled_fixedsize_stack.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace ctx = boost::context;

static const std::size_t kStack = 64 * 1024;

static double now_ns()
{
    return std::chrono::duration<double, std::nano>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

static double warm(long n)
{
    ctx::pooled_fixedsize_stack pool(kStack);
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        ctx::fiber f{std::allocator_arg, pool,
                     [](ctx::fiber &&back) { return std::move(back); }};
        f = std::move(f).resume();
    }
    return (now_ns() - t0) / (double)n;
}

static double cold(long n)
{
    ctx::protected_fixedsize_stack alloc(kStack);
    double t0 = now_ns();
    std::vector<ctx::fiber> all;
    all.reserve((std::size_t)n);
    for (long i = 0; i < n; i++)
        all.emplace_back(std::allocator_arg, alloc,
                         [](ctx::fiber &&back) { return std::move(back); });
    for (auto &f : all)
        f = std::move(f).resume();
    all.clear();
    return (now_ns() - t0) / (double)n;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (std::strcmp(argv[1], "warm") && std::strcmp(argv[1], "cold"))) {
        std::fprintf(stderr, "usage: %s warm|cold [N [REPS]]\n", argv[0]);
        return 2;
    }
    bool is_cold = !std::strcmp(argv[1], "cold");
    long n = argc > 2 ? std::atol(argv[2]) : 1000000;
    int reps = argc > 3 ? std::atoi(argv[3]) : 5;
    if (is_cold)
        cold(1000);
    else
        warm(10000);
    for (int r = 0; r < reps; r++) {
        std::printf("%.2f\n", is_cold ? cold(n) : warm(n));
        std::fflush(stdout);
    }
    return 0;
}
