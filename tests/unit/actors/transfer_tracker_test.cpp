#include "actors/transfer_tracker.hpp"

#include <doctest/doctest.h>

using namespace kvlane::actors;

namespace {

transfer_job job_of(transfer_kind kind, std::uint64_t retained = 0, std::uint64_t bytes = 1024) {
  transfer_job j;
  j.kind = kind;
  j.retained = retained;
  j.bytes = bytes;
  return j;
}

} // namespace

TEST_CASE("transfer_tracker: transfers count as pending on the compute lane when serialized, "
          "else on the transfer lane") {
  transfer_tracker overlapped{false};
  CHECK(overlapped.lane() == transfer_lane::transfer);
  const auto dump = job_of(transfer_kind::dump);
  const auto load = job_of(transfer_kind::load);
  overlapped.started(dump);
  overlapped.started(load);
  CHECK(overlapped.pending() == 2);
  CHECK(overlapped.pending_on(transfer_lane::transfer) == 2);
  CHECK(overlapped.pending_on(transfer_lane::compute) == 0);
  overlapped.finished(load);
  CHECK(overlapped.pending() == 1);

  transfer_tracker serialized{true};
  CHECK(serialized.lane() == transfer_lane::compute);
  serialized.started(load);
  CHECK(serialized.pending() == 1);
  CHECK(serialized.pending_on(transfer_lane::compute) == 1);
  CHECK(serialized.pending_on(transfer_lane::transfer) == 0);
}

TEST_CASE("transfer_tracker: a dump under way promises its slot until it ends, a load promises "
          "none") {
  transfer_tracker sut;
  const auto seq_dump = job_of(transfer_kind::dump);
  const auto retained_dump = job_of(transfer_kind::dump, 7);
  const auto load = job_of(transfer_kind::load);
  sut.started(seq_dump);
  sut.started(retained_dump);
  sut.started(load);
  CHECK(sut.promised_slots() == 2);
  CHECK(sut.sequence_dumps() == 1);
  CHECK(sut.retained_dumps() == 1);
  CHECK(sut.loads() == 1);
  sut.finished(retained_dump);
  CHECK(sut.promised_slots() == 1);
  CHECK(sut.retained_dumps() == 0);
  sut.finished(seq_dump);
  sut.finished(load);
  CHECK(sut.promised_slots() == 0);
  CHECK(sut.pending() == 0);
}

TEST_CASE("transfer_tracker: the backlog counts the bytes of the dumps and of the loads queued or "
          "running, until each ends") {
  transfer_tracker sut;
  const auto dump = job_of(transfer_kind::dump, 0, 4096);
  const auto retained_dump = job_of(transfer_kind::dump, 7, 1024);
  const auto load = job_of(transfer_kind::load, 0, 512);
  sut.started(dump);
  sut.started(retained_dump);
  sut.started(load);
  auto b = sut.backlog();
  CHECK(b.transfers == 3);
  CHECK(b.dump_bytes == 5120);
  CHECK(b.load_bytes == 512);
  sut.finished(dump);
  b = sut.backlog();
  CHECK(b.transfers == 2);
  CHECK(b.dump_bytes == 1024);
  sut.finished(retained_dump);
  sut.finished(load);
  b = sut.backlog();
  CHECK(b.transfers == 0);
  CHECK(b.dump_bytes == 0);
  CHECK(b.load_bytes == 0);
}
