// Package cpumeter measures, for benchmarks, the CPU time (user + system)
// that local PostgreSQL instances and this process use over a window.
//
// Contract: Linux only (it reads /proc); an instance is named by its
// postmaster's pid (PostmasterOf finds it from any backend's pid). A
// window's figure counts every process of the instances: those alive at
// both ends by their difference, those that exited meanwhile through their
// postmaster's reaped time (Linux adds a reaped child's time to its
// parent's), those started meanwhile whole. It assumes 100 clock ticks a
// second (Linux's USER_HZ). ProcessCPU reads one process's own time since
// it started, ProcessWait its time runnable but waiting for a CPU. It
// measures; it changes nothing.
package cpumeter
