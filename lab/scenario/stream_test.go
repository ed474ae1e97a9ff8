package scenario

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/strictyaml"
)

// TestStreamChecks: a stream's block is checked like the timeline, and a
// restart of one of its ends without resume is refused with the fix.
func TestStreamChecks(t *testing.T) {
	_, err := Parse("s.yaml", []byte(inlineWorld+`steps:
  - stream:
      from: alice
      to: bob
      bytes: 1MiB
      through:
        - restart: {node: bob}
        - stop: {node: alice}
        - sleep: 1s
          background: x
  - stream: {from: alice, to: carol, bytes: 0, through: []}
  - start: {node: alice}
  - stream: {from: bob, to: alice, bytes: 1MiB, resume: true, through: [{restart: {node: bob}}]}
`), Options{})
	require.Error(t, err)
	assert.ErrorIs(t, err, strictyaml.ErrInvalid)
	for _, want := range []string{
		"steps[1].stream.through[1]: node bob stops or restarts during the stream and its sockets die with it, so one connection cannot carry every byte; set resume: true",
		"steps[1].stream.through[2]: node alice stops or restarts during the stream",
		"steps[1].stream.through[3].background: a step in a block cannot run in the background",
		"steps[1].stream.through: node alice is not running when the block ends; start it again within the block",
		"steps[2].stream.from: node alice is not running at this step",
		"steps[2].stream.to: node carol is not running at this step",
		"steps[2].stream.bytes: nothing to send",
		"steps[2].stream.through: the block has no steps",
	} {
		assert.Contains(t, err.Error(), want)
	}
	assert.NotContains(t, err.Error(), "steps[4]", "with resume, an end may restart")
	assert.NotContains(t, err.Error(), "steps[2].stream.through: node", "a node not running before the block is reported once")
}

// TestStartRefusedChecks: start_refused wants a stopped node and the text.
func TestStartRefusedChecks(t *testing.T) {
	_, err := Parse("s.yaml", []byte(inlineWorld+`steps:
  - start_refused: {node: alice, error: expired}
  - start_refused: {node: nobody, error: expired}
  - start_refused: {node: carol, error: " "}
`), Options{})
	require.Error(t, err)
	for _, want := range []string{
		"steps[1].start_refused.node: node alice is already running; stop it first",
		`steps[2].start_refused.node: no node "nobody"`,
		"steps[3].start_refused.error: say what the refusal must contain",
	} {
		assert.Contains(t, err.Error(), want)
	}
}

// refusingEnv starts nodes with a given error.
type refusingEnv struct {
	fakeEnv
	startErr error
	stopped  []string
}

func (e *refusingEnv) StartNodes(context.Context, ...string) error { return e.startErr }
func (e *refusingEnv) StopNode(name string) error {
	e.stopped = append(e.stopped, name)
	return nil
}

// TestStartRefusedRun: the refusal must come, and say what is expected.
func TestStartRefusedRun(t *testing.T) {
	a := &StartRefused{Node: "carol", Error: "join token expired"}
	env := &refusingEnv{startErr: errors.New(`node carol: register: join token expired`)}
	detail, _, err := a.Run(context.Background(), env)
	require.NoError(t, err)
	assert.Contains(t, detail, "refused: node carol: register: join token expired")

	env = &refusingEnv{startErr: errors.New("node carol: register: join token not accepted")}
	_, _, err = a.Run(context.Background(), env)
	assert.ErrorContains(t, err, `node carol was refused, but the error does not say "join token expired"`)

	env = &refusingEnv{}
	_, _, err = a.Run(context.Background(), env)
	assert.ErrorContains(t, err, `node carol started, want it refused`)
	assert.Equal(t, []string{"carol"}, env.stopped, "a node that started is stopped again")
}

// fakeStream is a StreamRun whose stats a test sets.
type fakeStream struct {
	during, final StreamStats
	err           error
}

func (s *fakeStream) Stats() StreamStats                                        { return s.during }
func (s *fakeStream) Wait(context.Context) (StreamStats, error)                 { return s.final, s.err }
func (s *fakeStream) Close() error                                              { return nil }
func (e *streamEnv) StartStream(context.Context, StreamSpec) (StreamRun, error) { return e.s, nil }
func (e *streamEnv) Say(string, ...any)                                         {}

type streamEnv struct {
	fakeEnv
	s *fakeStream
}

// TestStreamVerdict: a stream passes only with every byte once and
// intact, some after the block, and within its stall bound.
func TestStreamVerdict(t *testing.T) {
	ok := StreamStats{Received: 100, Done: true, SHAOK: true, Elapsed: time.Second, MaxStall: 100 * time.Millisecond}
	flowing := StreamStats{Received: 10}
	cases := []struct {
		name          string
		a             Stream
		during, final StreamStats
		err           error
		want          string
	}{
		{name: "clean", during: flowing, final: ok},
		{name: "lost", during: flowing, final: StreamStats{Received: 90, Lost: 10, Done: true}, want: "10 bytes lost, 0 duplicated, 0 corrupted"},
		{name: "finished before the block ended", during: ok, final: ok, want: "did not run through it"},
		{name: "stalled", a: Stream{MaxStall: 50 * time.Millisecond}, during: flowing, final: ok, want: "stalled 100ms, more than max_stall 50ms"},
		{name: "reconnected without resume", during: flowing, final: func() StreamStats { s := ok; s.Reconnects = 1; return s }(), want: "1 reconnects without resume"},
		{name: "broke", during: flowing, final: flowing, err: errors.New("connection reset"), want: "connection reset"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.a
			a.From, a.To, a.Bytes, a.Through = "alice", "bob", 100, []Step{{Sleep: new(Sleep)}}
			env := &streamEnv{s: &fakeStream{during: tt.during, final: tt.final, err: tt.err}}
			detail, metrics, err := a.Run(context.Background(), env)
			assert.NotEmpty(t, detail)
			assert.NotEmpty(t, metrics)
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tt.want)
		})
	}
}
