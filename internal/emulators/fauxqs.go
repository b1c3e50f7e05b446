package emulators

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// FauxqsLauncher is the node program that serves fauxqs on 127.0.0.1:port,
// keeping its queues and messages in dataDir (fauxqs's SQLite persistence,
// written as each change happens) when dataDir is not empty.
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
	// With a data directory, the stores are made and wired to fauxqs's
	// SQLite persistence as its startFauxqs does (which listens on every
	// interface, so it is not used).
	serve := fmt.Sprintf(`
const app = buildApp({ logger: false });
await app.listen({ port: %d, host: "127.0.0.1" });
`, port)
	if dataDir != "" {
		serve = fmt.Sprintf(`
const { SqsStore: Sqs } = await import(%s);
const { SnsStore } = await import(%s);
const { S3Store } = await import(%s);
const { PersistenceManager } = await import(%s);
const sqsStore = new Sqs(), snsStore = new SnsStore(), s3Store = new S3Store();
const persistence = new PersistenceManager(%s);
persistence.load(sqsStore, snsStore, s3Store);
sqsStore.persistence = persistence;
snsStore.persistence = persistence;
s3Store.persistence = persistence;
for (const q of sqsStore.allQueues()) q.persistence = persistence;
const app = buildApp({ logger: false, stores: { sqsStore, snsStore, s3Store } });
app.addHook("preClose", () => { persistence.close(); });
await app.listen({ port: %d, host: "127.0.0.1" });
`, mod("sqs/sqsStore.js"), mod("sns/snsStore.js"), mod("s3/s3Store.js"), mod("persistence.js"), strconv.Quote(dataDir), port)
	}
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
