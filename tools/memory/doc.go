// Package memory is the agent's memory, kept on the bus so that every
// instance shares it: the KV bucket agentwork_memory holds one key per
// document, each value the document's Markdown with when and by whom it
// was last written. The documents are
//
//   - long: long-term memory, curated facts in "## " sections (MEMORY.md);
//   - daily.YYYY-MM-DD: the log of one day, timestamped entries appended
//     by runs (memory/YYYY-MM-DD.md); it expires keep_days after its day;
//   - checklist: the heartbeat's checklist, when the heartbeat reads it
//     from memory (HEARTBEAT.md).
//
// Every write is a compare-and-set at the revision read (bus.Update), so
// two runs that append at once both land; the bucket keeps the last
// revisions of each document (bus.MemoryHistory). A Store reads and writes
// the documents, offers the memory tools (Tools), the memory section of a
// run's prompt (Prompt), and the NATS service the CLI uses (Service).
// People read and edit the documents as Markdown files (Export, Import).
package memory
