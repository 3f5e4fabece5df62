// Preloaded into every server process the [MP] harness starts (node --import): if the test process
// that started it goes away (a per-file timeout kills it), the server exits too instead of living
// on as an orphan holding CPU and database connections. It does not touch the service itself.
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) process.kill(process.pid, 'SIGKILL');
}, 500).unref();
