package dynamostore

import (
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// recordCache holds, per process, the records a sender turn would
// otherwise read again at every batch: its shard's record and status
// pages as this process last wrote or read them, and the payload records
// of the items it claimed. They save reads only, never decide a write:
//
//   - a shard record or status page is used as the base of a
//     compare-and-swap, which is conditional on the version the record
//     carries (sv for shards, v for pages). Every write of either moves
//     that version, so a record changed by another process since fails
//     the condition, and the write is redone on a fresh read. A decision
//     that writes nothing (an update rejected, no item due) is never
//     taken on a cached page: the page is read again first.
//   - only the shards of turns running in this process are cached: from
//     BeginTurn (which drops what was cached: the previous turn may have
//     run in another process, as SQS hands a group's messages to any
//     poller) to the AdvanceShard that ends the turn. A turn starts from
//     fresh reads and the cache saves the reads of its later batches.
//     Other processes (the reconciler, the API) cache nothing of a shard:
//     their records would be old by their next run, and a write on a
//     stale record costs a failed conditional write, dearer than the
//     read it saves.
//   - payload records are cached only as ClaimItems reads them: a job's
//     payloads are all written before it runs (PutItems refuses a running
//     job) and never change after; an entry lacking a wanted item is
//     read again all the same.
//
// Each map is bounded; when full it is cleared.
type recordCache struct {
	mu       sync.Mutex
	shards   map[string]map[string]types.AttributeValue // shardID → shard record
	pages    map[string]map[int64]cachedPage            // shardID → block → page record
	npages   int
	payloads map[string]map[string]payload // job pk + data sk → payloads by seq
	turns    map[string]bool               // shardID → a turn runs here
}

// cachedPage is a status page record as last written or read here.
type cachedPage struct {
	rec map[string]types.AttributeValue
}

const (
	maxCachedShards   = 4096
	maxCachedPages    = 8192
	maxCachedPayloads = 1024
)

func shardID(jobID string, index int) string { return jobID + "\x00" + strconv.Itoa(index) }

// shard returns the cached shard record, or nil.
func (c *recordCache) shard(jobID string, index int) map[string]types.AttributeValue {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shards[shardID(jobID, index)]
}

// beginTurn forgets what was cached of a shard and caches its records
// from now on; endTurn forgets them and stops.
func (c *recordCache) beginTurn(jobID string, index int) {
	c.dropShardRecords(jobID, index)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.turns == nil || len(c.turns) >= maxCachedShards {
		c.turns = map[string]bool{}
	}
	c.turns[shardID(jobID, index)] = true
}

func (c *recordCache) endTurn(jobID string, index int) {
	c.dropShardRecords(jobID, index)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.turns, shardID(jobID, index))
}

// putShard caches a shard record of a turn running here, unless a newer
// version (sv) is cached.
func (c *recordCache) putShard(jobID string, index int, rec map[string]types.AttributeValue) {
	if rec == nil {
		return
	}
	id := shardID(jobID, index)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.turns[id] {
		return
	}
	if old := c.shards[id]; old != nil && getN(old, "sv") > getN(rec, "sv") {
		return
	}
	if c.shards == nil || len(c.shards) >= maxCachedShards {
		c.shards = map[string]map[string]types.AttributeValue{}
	}
	c.shards[id] = rec
}

func (c *recordCache) dropShard(jobID string, index int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.shards, shardID(jobID, index))
}

// page returns the cached status page record, or nil.
func (c *recordCache) page(jobID string, index int, block int64) map[string]types.AttributeValue {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pages[shardID(jobID, index)][block].rec
}

// putPage caches a status page record of a turn's shard running here,
// unless a newer version (v) is cached.
func (c *recordCache) putPage(jobID string, index int, block int64, rec map[string]types.AttributeValue) {
	if rec == nil {
		return
	}
	id := shardID(jobID, index)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.turns[id] {
		return
	}
	if old := c.pages[id][block].rec; old != nil && getN(old, "v") > getN(rec, "v") {
		return
	}
	if c.pages == nil || c.npages >= maxCachedPages {
		c.pages, c.npages = map[string]map[int64]cachedPage{}, 0
	}
	if c.pages[id] == nil {
		c.pages[id] = map[int64]cachedPage{}
	}
	if _, ok := c.pages[id][block]; !ok {
		c.npages++
	}
	c.pages[id][block] = cachedPage{rec: rec}
}

func (c *recordCache) dropPage(jobID string, index int, block int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.pages[shardID(jobID, index)]; m != nil {
		if _, ok := m[block]; ok {
			delete(m, block)
			c.npages--
		}
	}
}

// dropShardRecords forgets a shard's record and status pages.
func (c *recordCache) dropShardRecords(jobID string, index int) {
	id := shardID(jobID, index)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.shards, id)
	c.npages -= len(c.pages[id])
	delete(c.pages, id)
}

// payloads returns the cached payloads of a payload record, or nil.
func (c *recordCache) payloadsOf(id string) map[string]payload {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.payloads[id]
}

func (c *recordCache) putPayloads(id string, data map[string]payload) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.payloads == nil || len(c.payloads) >= maxCachedPayloads {
		c.payloads = map[string]map[string]payload{}
	}
	c.payloads[id] = data
}
