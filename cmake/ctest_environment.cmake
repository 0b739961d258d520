# Read by ctest before it starts any test (the root directory's TEST_INCLUDE_FILES), so every test
# process inherits what it sets here. It never overrides what the caller set.
#
# OMP_WAIT_POLICY=passive: ctest -j2 runs two test processes on CI's 2 cores, each with an OpenMP
# team of 2. A thread of the default policy spins at every barrier, holding a core that the other
# process's working thread needs, and that thread's partner then waits a scheduler slice at every
# parallel region. Tests are short runs of many small regions, so they lose most: the suite less
# its serial tests took 254 s that way and 92 s with passive waits (2 vCPUs, docs/testing.md).
# Only the waiting changes; every result and every thread count the tests ask for stays the same.
if(NOT DEFINED ENV{OMP_WAIT_POLICY})
    set(ENV{OMP_WAIT_POLICY} passive)
endif()
