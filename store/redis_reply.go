package store

import (
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/batchreply"
)

// errBadReply means a script answered something other than lua/doc.go
// says (six integers per entry and the time; a batch: each decision's
// compact answer and the time): the scripts on the server are not the ones
// this package was built with.
var errBadReply = errors.New("script reply is not what lua/doc.go says the script answers")

// Per-decision answers of the batch script (lua/doc.go) that are not
// decisions: the decision alone failed, the others of its call did not.
var (
	errBatchArgs  = errors.New("the batch script rejected the decision's arguments; nothing of it was written")
	errBatchWrite = errors.New("redis refused the decision's write (a request-id marker that is not an integer, or out of memory); nothing of it was written")
)

// entryReply is what the decide script answers for one entry (lua/doc.go),
// field by field, as batchreply.Decision also decodes a batch decision's
// answer.
type entryReply [6]int64

const (
	replyAllowed    = iota // 1 admitted, 0 denied; in a batch, -1 or -2 when not judged
	replyRemaining         // units left
	replyRetryAfter        // µs
	replyResetAfter        // µs
	replyReplayed          // 1 when an earlier admission under the request id was replayed
	replySeq               // the sequence the entry's state was written at; 0 when it wrote none with an era
)

// decision is the Decision g answers.
func (g entryReply) decision() tollgate.Decision {
	return tollgate.Decision{
		Allowed:    g[replyAllowed] == 1,
		Remaining:  g[replyRemaining],
		RetryAfter: micros(g[replyRetryAfter]),
		ResetAfter: micros(g[replyResetAfter]),
		Replayed:   g[replyReplayed] == 1,
	}
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// entryReplyLen is how many integers the decide script answers per entry.
const entryReplyLen = len(entryReply{})

// read records cmd's reply, a decide call's, as c's answer: one Decision
// per entry, then the server time.
func (c *call) read(cmd redis.Cmder) {
	v, err := cmd.(scriptCmd).Result()
	if err == nil && len(v) != entryReplyLen*c.entries+1 {
		err = errBadReply
	}
	if err != nil {
		c.err = err
		return
	}
	c.now = v[len(v)-1]
	for i := range c.decisions {
		g := entryReply(v[entryReplyLen*i:])
		c.decisions[i], c.seqs[i] = g.decision(), g[replySeq]
		c.decisions[i].At = time.UnixMicro(c.now)
	}
}

// read gives each call of s its own answer from cmd's reply, a batch
// call's, as a decide call of one entry answers; or its own error; or the
// whole call's error when the call failed as a whole (then the batch script
// wrote nothing) or its reply does not decode.
func (s *shared) read(cmd redis.Cmder) {
	v, err := cmd.(scriptCmd).Result()
	next := 0
	for _, c := range s.calls {
		if err != nil {
			break
		}
		g, n, ok := batchreply.Decision(v, next)
		if !ok {
			err = errBadReply
			break
		}
		next = n
		switch g[replyAllowed] {
		case -1:
			c.err = errBatchArgs
		case -2:
			c.err = errBatchWrite
		default:
			c.decisions[0], c.seqs[0] = entryReply(g).decision(), g[replySeq]
		}
	}
	if err == nil && next != len(v)-batchreply.Tail {
		err = errBadReply
	}
	for _, c := range s.calls {
		if err != nil {
			c.err = err
		} else {
			c.now = v[len(v)-1]
			c.decisions[0].At = time.UnixMicro(c.now)
		}
	}
}
