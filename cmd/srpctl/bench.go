package main

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gosrp/gosrp/internal/adminapi"
	"github.com/gosrp/gosrp/srp/initiator"
	"github.com/spf13/cobra"
)

// benchResult is one bench run's outcome (--json prints it).
type benchResult struct {
	Job        string  `json:"job"`
	RW         string  `json:"rw"`
	BlockSize  int     `json:"bs"`
	QueueDepth int     `json:"iodepth"`
	Channels   int     `json:"channels"`
	Procs      int     `json:"procs"`
	Runtime    float64 `json:"runtime_s"`
	// IOs counts the I/Os that completed with GOOD status; Errors the
	// ones that failed (not included in IOs, IOPS, MiBps or the latencies).
	IOs       int64   `json:"ios"`
	Errors    int64   `json:"errors"`
	IOPS      float64 `json:"iops"`      // completed I/Os per second
	MiBps     float64 `json:"mib_per_s"` // MiB per second of completed I/Os
	LatMeanUs float64 `json:"lat_mean_us"`
	LatP50Us  float64 `json:"lat_p50_us"`
	LatP99Us  float64 `json:"lat_p99_us"`
	LatP999Us float64 `json:"lat_p99_9_us"`
	LatMaxUs  float64 `json:"lat_max_us"`
}

// maxBenchBuffers bounds the data buffers bench allocates, bytes: two of
// --bs per I/O in flight (one with --verify).
const maxBenchBuffers = 1 << 30

// maxBenchQDPerChannel is the most I/Os bench keeps in flight per RDMA
// channel (--qd over the channel count). Each channel is logged in with a
// queue_size for its share of --qd, and the initiator allocates a receive
// buffer per IU of it; a target grants a channel far fewer credits
// (req_lim: 128 for srptd's default rq_size and for Linux ib_srpt), so
// 4096, 32 times that, leaves room for targets tuned beyond it.
const maxBenchQDPerChannel = 4096

// checkBenchQD refuses a --qd of more than maxBenchQDPerChannel I/Os per
// channel, before login; nch is the channel count (ch_count).
func checkBenchQD(qd, nch int) error {
	if most := nch * maxBenchQDPerChannel; qd > most {
		return fmt.Errorf("--qd %d: more than the %d I/Os bench keeps in flight over %d channel(s) (%d per channel; a target grants a channel 128 credits by default); lower --qd, or raise --channels", qd, most, nch, maxBenchQDPerChannel)
	}
	return nil
}

// checkCredits refuses a --qd of more than the commands the logged-in
// session can have outstanding: can_queue (min(req_lim-1, queue_size-2),
// from the target's SRP_LOGIN_RSP) on each of its channels. More I/Os
// would only wait in srpctl for a credit, and the latencies measured would
// include that wait.
func checkCredits(qd int, s *initiator.Session) error {
	li, nch := s.Info(), s.Options().ChCount
	if most := li.CanQueue * nch; qd > most {
		return fmt.Errorf("--qd %d: more than the %d commands the target lets this session have in flight (%d channel(s) x %d; its req_lim is %d per channel); lower --qd, or raise --channels", qd, most, nch, li.CanQueue, li.ReqLimDelta)
	}
	return nil
}

// checkBenchBuffers refuses a run whose data buffers would exceed
// maxBenchBuffers bytes: perIO buffers of bs bytes for each of qd I/Os in
// flight (a timed run holds a data-in and a data-out buffer per I/O, a
// --verify run one). qd, bs and perIO are at least 1.
func checkBenchBuffers(qd, bs, perIO int) error {
	if int64(qd) <= maxBenchBuffers/int64(perIO)/int64(bs) {
		return nil
	}
	need := new(big.Int).Mul(big.NewInt(int64(qd)*int64(perIO)), big.NewInt(int64(bs)))
	mib := strings.TrimSuffix(new(big.Rat).SetFrac(need, big.NewInt(1<<20)).FloatString(1), ".0")
	what := "1 buffer per I/O"
	if perIO == 2 {
		what = "2 buffers per I/O (data-in and data-out)"
	}
	return fmt.Errorf("--qd %d x --bs %d x %s = %s MiB: more than the %d MiB of data buffers bench allocates at most; lower --qd or --bs", qd, bs, what, mib, maxBenchBuffers>>20)
}

func newBenchCmd() *cobra.Command {
	var tf targetFlags
	var rw, bsStr, sizeStr string
	var qd, channels, rwmix, procs int
	var runtime time.Duration
	var asJSON, fua, registerEach, blocking bool
	var cpuProfile string
	var verify, verifyOnly bool
	var verifySeed uint64
	var loops int
	c := &cobra.Command{
		Use:   "bench TARGET [TARGET...]",
		Args:  cobra.MinimumNArgs(1),
		Short: "fio-like benchmark: random/sequential read/write, prints IOPS, bandwidth and latency percentiles",
		RunE: func(cmd *cobra.Command, args []string) error {
			bs64, err := adminapi.ParseSize(bsStr)
			if err != nil {
				return fmt.Errorf("--bs: %w", err)
			}
			bs := int(bs64)
			switch {
			case bs == 0:
				// Checked again against the LUN's block size after login.
				return errors.New("--bs 0: an I/O needs at least one logical block (512 bytes or more)")
			case qd < 1:
				return fmt.Errorf("--qd %d: at least 1 I/O in flight", qd)
			case runtime <= 0:
				return fmt.Errorf("--runtime %v: must be positive", runtime)
			case rwmix < 0 || rwmix > 100:
				return fmt.Errorf("--rwmixread %d: a percentage, 0..100", rwmix)
			case loops < 1:
				return fmt.Errorf("--loops %d: at least 1 pass", loops)
			case procs < 0:
				return fmt.Errorf("--procs %d: 1 or more (0: as many as I/Os and channels can use)", procs)
			case verifyOnly && !cmd.Flags().Changed("verify-seed"):
				return errors.New("--verify-only checks an earlier --verify run: give its --verify-seed (and --loops, --bs, --size, --lun)")
			}
			verify = verify || verifyOnly
			bufsPerIO := 2 // a data-in and a data-out buffer
			if verify {
				bufsPerIO = 1 // the pass's direction
			}
			if bs64 <= maxBenchBuffers/int64(bufsPerIO) {
				// One I/O's buffers fit: --qd makes the excess, whatever
				// the LUN. A --bs too large on its own is checked after
				// login, after the LUN's maximum transfer length, which
				// it usually exceeds too: the clearer reason.
				if err := checkBenchBuffers(qd, bs, bufsPerIO); err != nil {
					return err
				}
			}
			if verify && cmd.Flags().Changed("runtime") {
				// A verify pass covers the whole region however long it
				// takes: cut short, it would check only part of it.
				return errors.New("--runtime: a --verify run writes and reads back the whole region (--size) --loops times, however long that takes; bound it with --size instead")
			}
			if verify && !cmd.Flags().Changed("verify-seed") {
				verifySeed = rand.Uint64() >> 1 // printable as a positive decimal anywhere
			}
			switch rw {
			case "read", "write", "randread", "randwrite", "randrw", "rw":
			default:
				return fmt.Errorf("--rw %q: read, write, randread, randwrite, rw or randrw", rw)
			}
			if err := checkVerifyFlags(cmd, verify, rw, registerEach); err != nil {
				return err
			}
			if len(args) > 1 && !verify {
				return errors.New("several targets (gateways of one LU, through multipath) take --verify")
			}
			o, err := tf.options(args[0])
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("channels") {
				// initiator.Options: ch_count 1..255.
				if channels < 1 || channels > 255 {
					return fmt.Errorf("--channels %d: 1 to 255 RDMA channels", channels)
				}
				o.ChCount = channels
			}
			// One SRP_CMD per I/O: a transfer over max_sect would fail every
			// command. Without max_sect in TARGET the session's is raised
			// to fit --bs (ib_srp's default, 1024 sectors, is 512 KiB); one
			// TARGET sets is kept, and a --bs over it refused.
			sectors := (int64(bs) + 511) / 512
			switch {
			case o.MaxSect == 0 && sectors > initiator.DefaultMaxSect:
				o.MaxSect = int(sectors)
			case o.MaxSect > 0 && sectors > int64(o.MaxSect):
				return fmt.Errorf("--bs %d: above TARGET's max_sect %d x 512 bytes; raise it to max_sect=%d, or leave it out", bs, o.MaxSect, sectors)
			}
			// Enough IUs per channel for the queue depth (can_queue is
			// queue_size - 2); the target's req_lim may still cap it
			// (checkCredits, after login).
			nch := max(o.ChCount, 1)
			if err := checkBenchQD(qd, nch); err != nil {
				return err
			}
			if need := (qd+nch-1)/nch + 2; o.QueueSize < need {
				o.QueueSize = max(need, initiator.DefaultQueueSize)
			}
			if procs == 0 {
				// No more threads than commands can run in parallel: one
				// per channel (each channel's completions arrive in order
				// on one reader), at most one per I/O in flight, at most
				// one per CPU.
				procs = min(qd, cmp.Or(o.ChCount, initiator.AutoChCount()), goruntime.NumCPU())
			}
			goruntime.GOMAXPROCS(procs)
			body := func(ctx context.Context, s *conn) error {
				if err := checkCredits(qd, s.Session); err != nil {
					return err
				}
				capy, err := s.ReadCapacity16(ctx, s.lun)
				if err != nil {
					return err
				}
				bsz := int(capy.BlockSize)
				if bs < bsz {
					return fmt.Errorf("--bs %d: less than one logical block of LUN %d (%d bytes); an I/O needs at least one", bs, tf.lun, bsz)
				}
				if bs%bsz != 0 {
					return fmt.Errorf("--bs %d is not a multiple of LUN %d's %d-byte logical block", bs, tf.lun, bsz)
				}
				// Block limits (SBC-3 §6.6.4): a transfer above MAXIMUM
				// TRANSFER LENGTH (bytes 8-11, blocks; 0: none stated)
				// fails every command with INVALID FIELD IN CDB.
				if b, err := s.Inquiry(ctx, s.lun, true, 0xb0, 64); err == nil && len(b) >= 12 {
					if mt := binary.BigEndian.Uint32(b[8:]); mt > 0 && uint64(bs/bsz) > uint64(mt) {
						return fmt.Errorf("--bs %d: above the LUN's maximum transfer length of %d blocks (%d bytes, VPD page B0h)", bs, mt, uint64(mt)*uint64(bsz))
					}
				}
				if err := checkBenchBuffers(qd, bs, bufsPerIO); err != nil {
					return err
				}
				region := int64(capy.Bytes())
				if sizeStr != "" {
					sz, err := adminapi.ParseSize(sizeStr)
					if err != nil {
						return fmt.Errorf("--size: %w", err)
					}
					if sz > region {
						return fmt.Errorf("--size %s (%d bytes): larger than LUN %d's capacity of %d bytes (%d blocks of %d bytes, READ CAPACITY)", sizeStr, sz, tf.lun, region, capy.Blocks(), bsz)
					}
					region = sz
				}
				nblk := uint64(region) / uint64(bs) // bs-sized slots
				if nblk == 0 {
					return fmt.Errorf("region of %d bytes smaller than --bs %d", region, bs)
				}
				if cpuProfile != "" {
					f, err := os.Create(cpuProfile)
					if err != nil {
						return err
					}
					defer f.Close()
					if err := pprof.StartCPUProfile(f); err != nil {
						return err
					}
					defer pprof.StopCPUProfile()
				}
				if verify {
					return benchVerify(ctx, cmd, s, verifyConfig{
						bs: bs, bsz: bsz, qd: qd, nslots: nblk, random: strings.HasPrefix(rw, "rand"),
						seed: verifySeed, loops: loops, verifyOnly: verifyOnly, fua: fua,
					}, asJSON)
				}
				res, fatal := runBench(ctx, s, rw, bs, bsz, qd, rwmix, nblk, runtime, fua, registerEach, blocking)
				res.Channels, res.Procs = s.Options().ChCount, goruntime.GOMAXPROCS(0)
				res.Job = fmt.Sprintf("%s-%s", rw, strings.ToLower(bsStr))
				w := cmd.OutOrStdout()
				if asJSON {
					// The figures so far, and the same exit status as the
					// text form.
					enc := json.NewEncoder(w)
					enc.SetIndent("", "  ")
					if err := enc.Encode(res); err != nil {
						return err
					}
				}
				if fatal != nil {
					return fmt.Errorf("bench stopped after %d completed and %d failed I/Os: %w", res.IOs, res.Errors, fatal)
				}
				if asJSON {
					if res.Errors > 0 {
						return fmt.Errorf("%d of %d I/Os failed", res.Errors, res.IOs+res.Errors)
					}
					return nil
				}
				fmt.Fprintf(w, "%s: bs=%d iodepth=%d channels=%d procs=%d runtime=%.1fs\n", res.Job, bs, qd, res.Channels, res.Procs, res.Runtime)
				// IOPS, bandwidth and latencies are of the completed I/Os.
				fmt.Fprintf(w, "  I/Os: completed=%d failed=%d; IOPS=%.0f, BW=%.1f MiB/s (completed I/Os)\n", res.IOs, res.Errors, res.IOPS, res.MiBps)
				fmt.Fprintf(w, "  lat (us): mean=%.1f p50=%.1f p99=%.1f p99.9=%.1f max=%.1f\n", res.LatMeanUs, res.LatP50Us, res.LatP99Us, res.LatP999Us, res.LatMaxUs)
				if res.Errors > 0 {
					return fmt.Errorf("%d of %d I/Os failed", res.Errors, res.IOs+res.Errors)
				}
				return nil
			}
			if len(args) > 1 {
				return tf.withMultipath(cmd.Context(), args, func(po *initiator.Options) {
					po.ChCount, po.QueueSize = o.ChCount, o.QueueSize
					if po.MaxSect == 0 {
						po.MaxSect = o.MaxSect
					}
				}, body)
			}
			return tf.withSessionOptions(cmd.Context(), o, body)
		},
	}
	addTargetFlags(c, &tf, true)
	f := c.Flags()
	f.StringVar(&rw, "rw", "randread", "read, write, randread, randwrite, rw, randrw (with --verify only the order: rand* random, else ascending; not rw or randrw)")
	f.StringVar(&bsStr, "bs", "4k", "bytes per I/O, a whole number of logical blocks: "+adminapi.SizeSyntax)
	f.StringVar(&sizeStr, "size", "", "bytes of the LUN to use, from LBA 0, at most its capacity (default all): "+adminapi.SizeSyntax)
	f.IntVar(&qd, "qd", 32, "I/Os in flight (iodepth): at most what the target's credits allow over the channels (req_lim - 1 per channel; 127 with srptd's defaults), 4096 per channel, and 1 GiB of buffers (two of --bs per I/O, one with --verify)")
	f.IntVar(&channels, "channels", 0, "RDMA channels, 1..255 (overrides ch_count; default: TARGET's ch_count, else min(4, CPUs))")
	f.IntVar(&procs, "procs", 0, "OS threads running Go code at once (GOMAXPROCS; default: the smallest of --qd, the channel count and the CPU count)")
	f.IntVar(&rwmix, "rwmixread", 50, "percentage of reads for rw/randrw (not with --verify)")
	f.DurationVar(&runtime, "runtime", 10*time.Second, "how long a timed run lasts (not with --verify, which covers the region --size names)")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON (ios: completed I/Os, errors: failed I/Os)")
	f.BoolVar(&fua, "fua", false, "set FUA on writes")
	f.BoolVar(&registerEach, "register-each", false, "register each command's memory instead of reusing registered buffers (not with --verify)")
	f.BoolVar(&blocking, "blocking", false, "one goroutine per I/O in flight, each waiting for its command in Session.Run, instead of submitting the next command from the completion of the last (Session.Submit); always so with --register-each")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of the run (timed or --verify) to this file")
	f.BoolVar(&verify, "verify", false, "data integrity run instead of a timed one: write every --bs slot of the region with CRC32C-checked blocks that carry their LBA, the run's seed and the pass, then read all back and check; exit status 1 on any mismatch")
	f.BoolVar(&verifyOnly, "verify-only", false, "only read back and check what an earlier --verify run with the same --verify-seed, --loops, --bs, --size and --lun wrote")
	f.Uint64Var(&verifySeed, "verify-seed", 0, "the --verify run's identity, written into every block (default random, printed)")
	f.IntVar(&loops, "loops", 1, "--verify passes; pass k writes generation k over the previous one, so a lost write reads back stale")
	c.Long += `

--verify turns bench into a data integrity check, like fio's verify=crc32c:
every logical block written carries a header with its own LBA, the run's
seed and the pass number, and a CRC32C over the block. Each pass writes the
whole region (random order for --rw randread or randwrite, else ascending;
rw and randrw, --rwmixread and --register-each are refused) and then reads it
all back in another order; a block with a bad CRC (corrupt), another LBA
(misplaced), another pass (stale) or no header fails the run with exit
status 1. It takes no --runtime: --size bounds it. --verify-only re-reads
a region written earlier (for instance across a target restart).

--procs sets how many threads run srpctl's Go code at once. By default it
is the smallest of --qd, the channel count and the CPU count: no more
threads than commands can progress in parallel. At --qd 1 that is one
thread, as one fio job: the channel's reader and the I/O worker then hand
the command and its completion to each other without waking a second
thread, which would cost a third of the client's CPU time per I/O.`
	return c
}

// checkVerifyFlags refuses, for a --verify run, the timed run's flags it
// would not honour: a verify pass writes the whole region and then reads
// it all back, so it has no read/write mix (--rw rw or randrw,
// --rwmixread); --rw only orders it (rand*: random, else ascending). Its
// buffers are registered once per worker, whatever --register-each says.
// A timed run refuses the flags only --verify uses (--loops,
// --verify-seed).
func checkVerifyFlags(cmd *cobra.Command, verify bool, rw string, registerEach bool) error {
	if !verify {
		for _, name := range []string{"loops", "verify-seed"} {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("--%s: only a --verify or --verify-only run takes it; a timed run has no passes and writes no seed", name)
			}
		}
		return nil
	}
	const how = "a --verify pass writes the whole region, then reads it all back"
	switch {
	case rw == "rw" || rw == "randrw":
		return fmt.Errorf("--rw %s: %s, with no read/write mix; --rw orders it: randwrite or randread for a random order, write or read for an ascending one", rw, how)
	case cmd.Flags().Changed("rwmixread"):
		return fmt.Errorf("--rwmixread: %s, with no read/write mix to set", how)
	case registerEach:
		return errors.New("--register-each: a --verify run registers each worker's buffer once; it has no per-command registration")
	}
	return nil
}

// benchVerify runs --verify / --verify-only and reports: an error (exit
// status 1) when any block mismatched or any I/O failed.
func benchVerify(ctx context.Context, cmd *cobra.Command, s *conn, vc verifyConfig, asJSON bool) error {
	r, err := runVerify(ctx, s, vc)
	for _, m := range r.First {
		fmt.Fprintln(cmd.ErrOrStderr(), "srpctl bench: verify:", m)
	}
	if more := r.Mismatches + r.IOErrors - int64(len(r.First)); more > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "srpctl bench: verify: ... and %d more\n", more)
	}
	if err != nil {
		return fmt.Errorf("verify stopped after %d blocks written and %d read: %w", r.Written, r.Read, err)
	}
	w := cmd.OutOrStdout()
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{
			"verify_seed": vc.seed, "loops": vc.loops, "bs": vc.bs, "iodepth": vc.qd,
			"blocks_written": r.Written, "blocks_read": r.Read, "mismatches": r.Mismatches,
			"io_errors": r.IOErrors, "runtime_s": r.Elapsed.Seconds(),
		}); err != nil {
			return err
		}
	} else {
		mode := "verify"
		if vc.verifyOnly {
			mode = "verify-only"
		}
		fmt.Fprintf(w, "%s: seed=%d loops=%d bs=%d iodepth=%d slots=%d runtime=%.1fs\n", mode, vc.seed, vc.loops, vc.bs, vc.qd, vc.nslots, r.Elapsed.Seconds())
		fmt.Fprintf(w, "  blocks written=%d read=%d mismatches=%d io_errors=%d\n", r.Written, r.Read, r.Mismatches, r.IOErrors)
	}
	if r.Mismatches > 0 || r.IOErrors > 0 {
		return fmt.Errorf("verify failed: %d of %d blocks mismatched, %d I/O errors (seed %d)", r.Mismatches, r.Read, r.IOErrors, vc.seed)
	}
	return nil
}

// runBench runs qd workers for runtime. It stops early when the session is
// gone for good (dev_loss_tmo expired, or closed) and returns that error.
func runBench(ctx context.Context, s *conn, rw string, bs, bsz, qd, rwmix int, nslots uint64, runtime time.Duration, fua, registerEach, blocking bool) (benchResult, error) {
	ctx, cancel := context.WithTimeout(ctx, runtime)
	defer cancel()
	job := benchJob{rw: rw, bs: bs, bsz: bsz, qd: qd, rwmix: rwmix, nslots: nslots, fua: fua}
	fails := newBenchFailures(s, cancel)
	if !registerEach && !blocking {
		return runBenchAsync(ctx, fails, s, job)
	}
	var mu sync.Mutex
	var all []time.Duration
	var ios, errs int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < qd; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			// One registered buffer per direction per worker: no memory
			// registration on the data path (unless --register-each).
			var cmd initiator.Command
			var cdb [16]byte
			cmd.LUN, cmd.CDB = s.lun, cdb[:]
			var inBuf, outBuf *initiator.Buffer
			bufs := [][]byte{make([]byte, bs)}
			if !registerEach {
				var err error
				if inBuf, err = s.NewBuffer(bs, true); err == nil {
					defer inBuf.Release()
					outBuf, err = s.NewBuffer(bs, false)
				}
				if err != nil {
					s.Options().Logger.Error("bench: register buffers", "err", err)
					return
				}
				defer outBuf.Release()
				bufs[0] = outBuf.Bytes()
			}
			for i := range bufs[0] {
				bufs[0][i] = byte(i*7 + w)
			}
			lat := make([]time.Duration, 0, 1<<14)
			var n, ne int64
			seq := uint64(w) * (nslots / uint64(qd))
			for ctx.Err() == nil {
				slot, read := job.pick(rng, &seq)
				cmd.DataIn, cmd.DataOut, cmd.Buffer = nil, nil, nil
				switch {
				case registerEach && read:
					cmd.DataIn = bufs
				case registerEach:
					cmd.DataOut = bufs
				case read:
					cmd.Buffer, cmd.Length = inBuf, bs
				default:
					cmd.Buffer, cmd.Length = outBuf, bs
				}
				initiator.PutRW16(cdb[:], !read, slot*uint64(bs/bsz), uint32(bs/bsz), fua && !read)
				t0 := time.Now()
				// Run re-issues a command that met a UNIT ATTENTION (after a
				// reconnect, a reset), as the SCSI midlayer would under fio.
				_, err := s.Run(context.Background(), &cmd)
				d := time.Since(t0)
				if err != nil {
					ne++
					if fails.note(ctx, err) {
						break
					}
					if ctx.Err() == nil {
						time.Sleep(time.Millisecond)
					}
					continue
				}
				n++
				lat = append(lat, d)
			}
			mu.Lock()
			all = append(all, lat...)
			ios += n
			errs += ne
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	return summarize(rw, bs, qd, start, ios, errs, all), fails.fatalErr()
}

// summarize makes the result of a timed run from its counts and latencies.
func summarize(rw string, bs, qd int, start time.Time, ios, errs int64, all []time.Duration) benchResult {
	el := time.Since(start).Seconds()
	r := benchResult{RW: rw, BlockSize: bs, QueueDepth: qd, Runtime: el, IOs: ios, Errors: errs}
	r.IOPS = float64(ios) / el
	r.MiBps = r.IOPS * float64(bs) / (1 << 20)
	if len(all) > 0 {
		slices.Sort(all)
		us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
		pct := func(p float64) float64 { return us(all[min(len(all)-1, int(p*float64(len(all))))]) }
		var sum time.Duration
		for _, d := range all {
			sum += d
		}
		r.LatMeanUs = us(sum / time.Duration(len(all)))
		r.LatP50Us, r.LatP99Us, r.LatP999Us = pct(0.50), pct(0.99), pct(0.999)
		r.LatMaxUs = us(all[len(all)-1])
	}
	return r
}
