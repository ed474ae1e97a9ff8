package node

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pion/logging"
)

// pionLogs routes pion's logs into the node's logger, all at debug level or
// below: pion reports as errors what is routine here (an ICE agent closed
// while a stats query runs, a candidate that failed), and would otherwise
// print them on stderr outside our logger.
type pionLogs struct{ log *slog.Logger }

var _ logging.LoggerFactory = pionLogs{}

// Levels pion's messages map to: below Debug, so -v shows pion's errors
// and warnings and a handler at Debug-4 shows everything.
const (
	pionErrorLevel = slog.LevelDebug
	pionDebugLevel = slog.LevelDebug - 2
	pionTraceLevel = slog.LevelDebug - 4
)

func (f pionLogs) NewLogger(scope string) logging.LeveledLogger {
	return pionLogger{log: f.log.With("pion", scope)}
}

type pionLogger struct{ log *slog.Logger }

func (l pionLogger) at(level slog.Level, msg string) {
	l.log.Log(context.Background(), level, msg)
}

func (l pionLogger) atf(level slog.Level, format string, args ...any) {
	if l.log.Enabled(context.Background(), level) {
		l.log.Log(context.Background(), level, fmt.Sprintf(format, args...))
	}
}

func (l pionLogger) Trace(msg string)                  { l.at(pionTraceLevel, msg) }
func (l pionLogger) Tracef(format string, args ...any) { l.atf(pionTraceLevel, format, args...) }
func (l pionLogger) Debug(msg string)                  { l.at(pionDebugLevel, msg) }
func (l pionLogger) Debugf(format string, args ...any) { l.atf(pionDebugLevel, format, args...) }
func (l pionLogger) Info(msg string)                   { l.at(pionDebugLevel, msg) }
func (l pionLogger) Infof(format string, args ...any)  { l.atf(pionDebugLevel, format, args...) }
func (l pionLogger) Warn(msg string)                   { l.at(pionErrorLevel, msg) }
func (l pionLogger) Warnf(format string, args ...any)  { l.atf(pionErrorLevel, format, args...) }
func (l pionLogger) Error(msg string)                  { l.at(pionErrorLevel, msg) }
func (l pionLogger) Errorf(format string, args ...any) { l.atf(pionErrorLevel, format, args...) }

// pionLogs is where the node's pion components (ICE agents, the UDPMux)
// log.
func (n *Node) pionLogs() pionLogs { return pionLogs{n.log.With("component", "ice")} }
