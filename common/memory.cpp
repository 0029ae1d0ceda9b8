#include "common/memory.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace attn {

std::string format_bytes(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

size_t host_memory_available() {
  std::ifstream in("/proc/meminfo");
  for (std::string key; in >> key;) {
    size_t kb = 0;
    in >> kb;
    if (key == "MemAvailable:") return kb * 1024;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

void throw_out_of_memory(const std::string& where, const std::string& label, size_t bytes,
                         size_t available) {
  std::ostringstream os;
  os << "out of " << where << " memory: " << label << " needs " << format_bytes(double(bytes));
  if (available > 0) os << " but " << format_bytes(double(available)) << " is available";
  os << "; make the problem smaller (--batch, --heads, --seqlen-q/-k)";
  throw OutOfMemory(os.str());
}

void require_host_memory(const std::string& label, size_t bytes) {
  const size_t available = host_memory_available();
  if (available > 0 && bytes > available) throw_out_of_memory("host", label, bytes, available);
}

}  // namespace attn
