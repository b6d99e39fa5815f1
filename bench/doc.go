// Package bench measures tollgate against github.com/go-redis/redis_rate on
// the same Redis in the same run. It is a module of its own, so the library
// never depends on redis_rate.
//
// The package holds what the benchmarks, the GCRA differential test and the
// load tool (cmd/load) share: a redis-server started for the measurement
// (StartRedis), the figures read back from Redis (CommandStats, UsedMemory)
// and the subjects under test, tollgate and redis_rate, behind one Decider
// interface so that every measurement runs both the same way.
package bench
