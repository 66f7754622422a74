'use strict';
// A CPU-bound loop for the symbolizer's jitdump test: one hot function with a name no builtin has.
function hotLoopForProfcpu(n) {
  let acc = 0;
  for (let i = 0; i < n; i++) acc = (acc * 31 + i) % 1000003;
  return acc;
}
const seconds = Number(process.argv[2] || 5);
const end = Date.now() + seconds * 1000;
let sink = 0;
sink += hotLoopForProfcpu(1e6);
console.log('ready');
while (Date.now() < end) sink += hotLoopForProfcpu(1e6);
console.log(sink > 0 ? 'done' : 'done.');
