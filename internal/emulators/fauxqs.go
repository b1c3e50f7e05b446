package emulators

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// FauxqsLauncher is the node program that serves fauxqs on 127.0.0.1:port,
// keeping its state in dataDir (SQLite) when dataDir is not empty.
//
// It also corrects one known fauxqs gap, so the queue conformance suite
// checks what real SQS FIFO does. fauxqs answers every DeleteMessage with
// success and expires receipt handles only lazily (on the next receive);
// SQS FIFO refuses a delete with a handle it never issued
// (ReceiptHandleIsInvalid) and with one whose visibility has expired
// (InvalidParameterValue "The receipt handle has expired", see the AWS
// SDK and LocalStack issues on FIFO deletes). The shim expires handles
// before DeleteMessage and ChangeMessageVisibility, and answers those two
// errors for FIFO queues; a second delete with the handle of a message
// already deleted keeps succeeding. Nothing else is changed.
//
// With shim false fauxqs runs unchanged, to see its own gaps.
func FauxqsLauncher(dist string, port int, shim bool, dataDir string) string {
	mod := func(rel string) string { return strconv.Quote("file://" + filepath.Join(dist, rel)) }
	opts := "{ logger: false }"
	if dataDir != "" {
		opts = fmt.Sprintf("{ logger: false, dataDir: %s }", strconv.Quote(dataDir))
	}
	serve := fmt.Sprintf(`
const app = buildApp(%s);
await app.listen({ port: %d, host: "127.0.0.1" });
`, opts, port)
	if !shim {
		return fmt.Sprintf("import { buildApp } from %s;\n", mod("app.js")) + serve
	}
	return fmt.Sprintf(`
import { buildApp } from %s;
import { SqsRouter } from %s;
import { SqsQueue } from %s;
import { SqsError } from %s;

const issued = new Set();
const deleted = new Set();
const dequeueFifo = SqsQueue.prototype.dequeueFifo;
SqsQueue.prototype.dequeueFifo = function (...args) {
  const msgs = dequeueFifo.apply(this, args);
  for (const m of msgs) issued.add(m.ReceiptHandle);
  return msgs;
};
const register = SqsRouter.prototype.register;
SqsRouter.prototype.register = function (action, handler) {
  if (action === "DeleteMessage" || action === "ChangeMessageVisibility") {
    const inner = handler;
    handler = (body, store, req) => {
      const q = body.QueueUrl ? store.getQueue(body.QueueUrl) : undefined;
      const h = body.ReceiptHandle;
      if (q && h) q.processTimers();
      if (action === "DeleteMessage" && q && q.isFifo() && h && !q.inflightMessages.has(h) && !deleted.has(h)) {
        if (issued.has(h)) {
          throw new SqsError("InvalidParameterValue", "Value " + h + " for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.");
        }
        throw new SqsError("ReceiptHandleIsInvalid", "The input receipt handle \"" + h + "\" is not a valid receipt handle.");
      }
      const out = inner(body, store, req);
      if (action === "DeleteMessage" && h) deleted.add(h);
      return out;
    };
  }
  return register.call(this, action, handler);
};
`, mod("app.js"), mod("sqs/sqsRouter.js"), mod("sqs/sqsStore.js"), mod("common/errors.js")) + serve
}
