// boost_switch — the peer: nanoseconds per Boost.Context switch.
//
//   boost_switch N REPS   two contexts (boost::context::fiber) resume each
//                         other N times; one resume() is one switch
//
// Prints one figure (ns per switch) per repetition, one per line.
#include <boost/context/fiber.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace ctx = boost::context;

static double bench(long n)
{
    ctx::fiber peer{[](ctx::fiber &&back) {
        for (;;)
            back = std::move(back).resume();
        return std::move(back);
    }};
    for (long i = 0; i < 1000; i++) // warm up
        peer = std::move(peer).resume();
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; i++)
        peer = std::move(peer).resume();
    auto t1 = std::chrono::steady_clock::now();
    double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
    return ns / (2.0 * (double)n); // there and back
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? std::atol(argv[1]) : 10000000;
    int reps = argc > 2 ? std::atoi(argv[2]) : 5;
    for (int r = 0; r < reps; r++) {
        std::printf("%.2f\n", bench(n));
        std::fflush(stdout);
    }
    return 0;
}
