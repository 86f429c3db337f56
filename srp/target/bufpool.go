package target

import (
	"errors"

	"github.com/gosrp/gosrp/rdma"
)

// getBuf returns a registered buffer of at least n bytes (local write
// access, for RDMA READ sinks and RDMA WRITE sources).
func (c *channel) getBuf(n int) (rdma.MemoryRegion, error) {
	class := bufClass(n)
	if !c.port.reserveData(class) {
		return nil, errDataMemory
	}
	mr, err := c.takeBuf(class)
	if err != nil {
		c.port.releaseData(class)
	}
	return mr, err
}

// takeBuf is getBuf of a size class whose charge against
// Config.MaxDataMemory the caller has already taken; putBuf gives it back
// with the buffer.
func (c *channel) takeBuf(class int) (rdma.MemoryRegion, error) {
	if l := c.pool[class]; len(l) > 0 {
		mr := l[len(l)-1]
		c.pool[class] = l[:len(l)-1]
		c.poolBytes -= class
		c.inUse[mr] = struct{}{}
		return mr, nil
	}
	mr, err := c.port.register(make([]byte, class), rdma.AccessLocalWrite)
	if err != nil {
		return nil, err
	}
	c.inUse[mr] = struct{}{}
	return mr, nil
}

// bufClass is the size class of a data buffer of n bytes: the power of two
// at least n, and at least 4096.
func bufClass(n int) int {
	class := 4096
	for class < n {
		class <<= 1
	}
	return class
}

// errDataMemory reports that a buffer would take the port's data buffers
// beyond Config.MaxDataMemory.
var errDataMemory = errors.New("port data memory budget (max_data_memory) exhausted")

// maxPoolBytes bounds the free data buffers a channel keeps for reuse, in
// bytes; within it the channel keeps up to one buffer per request-limit
// credit in each size class, so that at full queue depth no command
// allocates and registers a buffer.
const maxPoolBytes = 32 << 20

// putBuf gives back a buffer from getBuf and its charge against
// Config.MaxDataMemory.
func (c *channel) putBuf(mr rdma.MemoryRegion) {
	if mr == nil || c.inUse == nil {
		return
	}
	if _, ok := c.inUse[mr]; !ok {
		return
	}
	delete(c.inUse, mr)
	class := len(mr.Bytes())
	c.port.releaseData(class)
	if len(c.pool[class]) < c.cfg.RQSize && c.poolBytes+class <= maxPoolBytes {
		c.pool[class] = append(c.pool[class], mr)
		c.poolBytes += class
		return
	}
	_ = mr.Deregister()
}
