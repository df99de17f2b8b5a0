package redisconn_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/redisconn"
	"github.com/bgjobs/bgjobs/internal/testenv"
)

// A Sentinel URL carries the master's password and the database: a write
// through it lands in that database of a password-protected master.
func TestSentinelURLWithPasswordAndDatabase(t *testing.T) {
	t.Parallel()
	master := testenv.StartRedisServer(t, "--requirepass", "m4ster")
	sentinel := testenv.StartSentinel(t, master.Port, "mymaster", "m4ster")
	url := "redis-sentinel://127.0.0.1:" + strconv.Itoa(sentinel) + "/3?master=mymaster&password=m4ster"

	opt, err := redisconn.ConnOpt(url)
	require.NoError(t, err)
	f := opt.(asynq.RedisFailoverClientOpt)
	require.Equal(t, 3, f.DB)
	require.Equal(t, "m4ster", f.Password)

	rdb, err := redisconn.Open(url)
	require.NoError(t, err)
	defer rdb.Close()
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, "through-sentinel", "yes", 0).Err())
	direct := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(master.Port), Password: "m4ster", DB: 3})
	defer direct.Close()
	v, err := direct.Get(ctx, "through-sentinel").Result()
	require.NoError(t, err)
	require.Equal(t, "yes", v, "written to database 3 of the master")

	for _, bad := range []string{"redis-sentinel://127.0.0.1:1/x?master=m", "redis-sentinel://127.0.0.1:1/0"} {
		_, err := redisconn.ConnOpt(bad)
		require.Error(t, err, bad)
	}
}
