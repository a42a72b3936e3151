import BleotaEngine
import BleotaLink
import BleotaTestSupport
import Synchronization
import Testing

@testable import BleotaFleet

/// The transfer gate a fleet's adapter shares: at most `capacity` transfers,
/// places given in arrival order, given back when a transfer step ends, and a
/// cancelled wait leaves without one.
@Suite struct TransferGateTests {
    /// A list several tasks append to.
    final class Log: Sendable {
        let items = Mutex<[Int]>([])
        func append(_ item: Int) { items.withLock { $0.append(item) } }
        var all: [Int] { items.withLock { $0 } }
    }

    /// Waits until `condition` holds, yielding to the other tasks (the gate has no clock of its own).
    func eventually(_ condition: () -> Bool) async {
        for _ in 0..<10_000 where !condition() { await Task.yield() }
    }

    /// `gate`'s one place held by a turn, and a second turn queued behind it (its wait's task).
    func heldWithOneWaiting(_ gate: TransferGate, clock: ManualClock) async -> (holder: GatedTransferTurn, waiter: GatedTransferTurn, wait: Task<Bool, Never>) {
        let holder = GatedTransferTurn(gate: gate)
        await holder.wait(clock: clock)
        let waiter = GatedTransferTurn(gate: gate)
        let wait = Task { await waiter.wait(clock: clock) }
        await eventually { gate.waiting == 1 }
        return (holder, waiter, wait)
    }

    @Test func placesAreGivenInArrivalOrderAndNeverBeyondCapacity() async {
        let clock = ManualClock()
        let gate = TransferGate(capacity: 2)
        let order = Log()
        let turns = (0..<5).map { _ in GatedTransferTurn(gate: gate) }
        await turns[0].wait(clock: clock)
        await turns[1].wait(clock: clock)
        #expect(gate.holding == 2 && gate.isFull)
        await withTaskGroup(of: Void.self) { group in
            for index in 2..<5 {
                group.addTask {
                    await turns[index].wait(clock: clock)
                    order.append(index)
                }
                // Queue them one after another, so arrival order is 2, 3, 4.
                await eventually { gate.waiting == index - 1 }
            }
            #expect(gate.waiting == 3)
            #expect(order.all.isEmpty, "nobody passes a full gate")
            turns[0].release()
            turns[0].release()
            await eventually { order.all.count == 1 }
            #expect(order.all == [2], "a second release of the same turn gives nothing more")
            turns[1].release()
            turns[2].release()
            await group.waitForAll()
        }
        #expect(order.all == [2, 3, 4])
        #expect(gate.holding == 2 && gate.waiting == 0)
        turns[3].release()
        turns[4].release()
        #expect(gate.holding == 0)
    }

    @Test func aCancelledWaitLeavesWithoutAPlace() async {
        let clock = ManualClock()
        let gate = TransferGate(capacity: 1)
        let (holder, waiter, task) = await heldWithOneWaiting(gate, clock: clock)
        task.cancel()
        let placed = await task.value
        #expect(!placed && !waiter.isHeld)
        #expect(gate.waiting == 0)
        holder.release()
        #expect(gate.holding == 0, "the cancelled waiter was not handed the place")
    }

    /// A device waits at most `maximumWait` (virtual time here), then transfers without a place,
    /// saying so; the gate's count is left alone and giving back the place it never had does nothing.
    @Test func aWaitThatRunsOutTransfersBesideTheOthersAndSaysSo() async throws {
        let notes = Mutex<[String]>([])
        let (placed, report, holding) = try await SimulationRuntime.run { runtime in
            let gate = TransferGate(capacity: 1)
            let holder = GatedTransferTurn(gate: gate)
            await holder.wait(clock: runtime.clock)
            let turn = GatedTransferTurn(gate: gate, maximumWait: .seconds(60))
            var recorder = OperationRecorder(operation: "flash", protocolName: "p", device: "d", clock: runtime.clock, transferTurn: turn) { event in
                if case .note(let text) = event { notes.withLock { $0.append(text) } }
            }
            recorder.enter(.reconnect)
            try await recorder.enterTransfer()
            let placed = turn.isHeld
            recorder.enter(.verify)
            let report = recorder.finish(bytes: 1, transfer: nil, statistics: TransferStatistics(), tuning: TransferTuning())
            return (placed, report, gate.holding)
        }
        #expect(!placed)
        #expect(holding == 1, "only the holder counts")
        #expect(report.stepSeconds[OperationRecorder.transferWaitKey] == 60)
        #expect(notes.withLock { $0 } == ["waited 60 s for a transfer place; transferring beside the others rather than leave the device idle longer"])
    }

    @Test func theRecorderWaitsBeforeTheTransferStepAndGivesThePlaceBackWhenItLeaves() async throws {
        let clock = ManualClock()
        let gate = TransferGate(capacity: 1)
        let other = GatedTransferTurn(gate: gate)
        await other.wait(clock: clock)
        let queued = Log()
        let turn = GatedTransferTurn(gate: gate) { queued.append(1) }
        let events = Events()
        var recorder = OperationRecorder(
            operation: "flash", protocolName: "p", device: "d", clock: clock,
            transferTurn: turn, onEvent: events.add)
        recorder.enter(.reconnect)
        let waiting = recorder
        let entering = Task {
            var copy = waiting
            try await copy.enterTransfer()
            return copy
        }
        await eventually { gate.waiting == 1 }
        #expect(events.steps == ["reconnect"], "the transfer step waits for its place")
        #expect(queued.all == [1])
        clock.advance(.seconds(3))
        other.release()
        var entered = try await entering.value
        #expect(events.steps == ["reconnect", "transfer"])
        #expect(turn.isHeld && gate.holding == 1)
        clock.advance(.seconds(2))
        entered.enter(.verify)
        #expect(!turn.isHeld && gate.holding == 0, "leaving the transfer step gives the place back")
        let report = entered.finish(bytes: 1, transfer: nil, statistics: TransferStatistics(), tuning: TransferTuning())
        #expect(report.stepSeconds[OperationRecorder.transferWaitKey] == 3, "the wait is reported on its own")
        #expect(report.stepSeconds["reconnect"] == 0, "and not as the step before it")
        #expect(report.stepSeconds["transfer"] == 2)
    }

    /// A withdrawn wait: the newest movable waiter leaves with no place, its recorder throws before
    /// the transfer step (naming why), and a waiter that may not move keeps its place in the queue.
    @Test func aWithdrawnWaitEndsTheUpdateBeforeItsTransfer() async throws {
        let clock = ManualClock()
        let gate = TransferGate(capacity: 1)
        let holder = GatedTransferTurn(gate: gate)
        await holder.wait(clock: clock)
        let fixed = GatedTransferTurn(gate: gate, movable: false)
        let fixedWait = Task { await fixed.wait(clock: clock) }
        await eventually { gate.waiting == 1 }
        let movable = GatedTransferTurn(gate: gate, movable: true)
        let events = Events()
        var recorder = OperationRecorder(
            operation: "flash", protocolName: "p", device: "d", clock: clock,
            transferTurn: movable, onEvent: events.add)
        recorder.enter(.reconnect)
        let waiting = recorder
        let entering = Task { () async -> TransferError? in
            var copy = waiting
            do throws(TransferError) { try await copy.enterTransfer() } catch { return error }
            return nil
        }
        await eventually { gate.waiting == 2 }
        #expect(gate.movableWaiters == 1)
        #expect(gate.withdrawNewestWaiter())
        let error = await entering.value
        #expect(error?.step == .transfer)
        #expect(error?.message == "left the queue for a transfer place: another adapter has one free, and the update starts again there")
        #expect(movable.wasWithdrawn && !movable.isHeld)
        #expect(events.steps == ["reconnect"], "no transfer step was entered")
        #expect(!gate.withdrawNewestWaiter(), "the other waiter may not move")
        holder.release()
        #expect(await fixedWait.value)
        #expect(fixed.isHeld && gate.holding == 1)
    }

    /// A place given back with no one waiting is reported (a fleet moves a queued device to it);
    /// one taken by a waiter is not.
    @Test func aPlaceFreedWithNoWaiterIsReported() async {
        let clock = ManualClock()
        let reported = Log()
        let gate = TransferGate(capacity: 1) { reported.append(1) }
        let (first, second, waiting) = await heldWithOneWaiting(gate, clock: clock)
        first.release()
        _ = await waiting.value
        #expect(reported.all.isEmpty, "the waiter took it")
        #expect(gate.freePlaces == 0)
        second.release()
        #expect(reported.all == [1])
        #expect(gate.freePlaces == 1)
    }
}
