/* The world around the charts, written once by hand (docs/statecharts/verification.md §3).

   Tasks are submitted by a producer that may cancel them; two workers
   connect, reconnect and resume through sessions held by two server
   processes (nodes); a dispatcher offers READY tasks; clocks let leases,
   quarantines and node heartbeats run out; a budget of FAULTS bounds the
   bad luck (a disconnect, a lease or node timing out while its holder is
   alive, a duplicated command). Every transaction is one atomic step that
   checks every chart it moves before it moves any (the store rolls back a
   refused one). The generated charts go at the charts marker line below.

   Ids: task t in 0..N_TASKS-1; its leases t*LPT .. t*LPT+LPT-1 (a key permit
   has its lease's id, a cancel intent its task's); sessions 1..N_WORKERS*SPW
   (the k-th of worker w is 1 + w*SPW + k; 0 is "none"); nodes 0 and 1. */

//@drives task lease key_permit cancellation instance node
/* Transitions of the driven charts this world never fires (generation fails on any other it leaves out):
   retry and purge start and end a task's record outside its life here; an operator's drain and a
   worker's capacity frames (and the drain a resume inherits) only take sessions out of dispatch. */
//@undriven task.retry task.purge instance.set_capacity instance.operator_drain instance.inherit_drain
//@command revision status retryable due old_session by_node sequence_newer drain source_found source_recoverable
//@property single_execution_right covers task lease -- at most one lease of a task is live, and only its holder's session gets an execution right from start, renew, resume or finish
//@property revision_current covers lease -- an accepted start, renew or finish carried the lease's current revision
//@property fencing_grows covers lease key_permit instance -- lease revisions, concurrency tokens and session epochs never go down; every new token and every new session's epoch is larger than every earlier one
//@property key_limit covers key_permit lease -- the holders of a key (live keyed leases, and lost workers whose permit is quarantined) never exceed its limit, and the key's counter equals its HELD and QUARANTINED permits
//@property cancel_kept covers cancellation task lease -- an open cancel intent always belongs to a running task (its row held, its live lease RUNNING) whose lease carries it; a task whose cancel was confirmed is never SUCCEEDED
//@property receipt_no_grant covers lease -- a duplicate answered from a receipt hands the lease back only to its current, live holder
//@property effect_uncertain covers task lease -- once an attempt of a task was lost after start, every later lease of it says effect_uncertain
//@property steps_agree covers task lease key_permit cancellation instance node -- every step a transaction runs is allowed by its own chart when the entry is
//@property no_dead_end covers * -- when nothing can move any more, every row is in its chart's initial or a terminal state
//@property terminates covers task lease -- under weak fairness every task reaches a terminal state (the workers keep coming back)

#define N_WORKERS 2
#define SUCCEEDED 1
#define FAILED 2
#define UNKNOWN 3
#define CANCELLED 4
#define RETRY_UNCERTAIN 1

byte key_outstanding, key_last_token, epoch_counter;
byte faults = FAULTS;
byte cancels = CANCELS;

//@charts

#define APPLY(f, a) f a
#define IDS(t, l, s, n) (t, l, l, t, s, n)
#define TASK_OF(l) ((l) / LPT)
#define CUR_LEASE(t) current[t]
/* A running task: its row held (OFFERED) by a live lease that started; a start writes the lease alone. */
#define RUNNING_TASK(t) (task_state[t] == task_OFFERED && lease_state[current[t]] == lease_RUNNING)
#define LIVE_SESSION(s) (instance_state[s] == instance_ACTIVE || instance_state[s] == instance_DRAINING)
#define LIVE_LEASE(l) (lease_state[l] == lease_OFFERED || lease_state[l] == lease_RUNNING)
#define OPEN_INTENT(t) (cancellation_state[t] == cancellation_REQUESTED || cancellation_state[t] == cancellation_NOTIFIED)
#define ALL_TASKS_DONE (ALL_task_TERMINAL)

/* What the workers know and believe (the model's view of the SDK). */
byte sess[N_WORKERS];          /* the worker's current session, 0: not connected */
byte used[N_WORKERS];          /* sessions opened so far (SPW at most) */
byte holder[N_lease];          /* worker + 1 that was offered the lease */
byte known_rev[N_lease];       /* the revision the holder last saw; 0: it forgot the lease */
byte known_owner[N_lease];     /* the session the holder last knew owned it */
bit running[N_lease];          /* the holder believes it may run the task (its execution right) */
byte next_lease[N_TASKS];      /* leases used so far per task */
byte current[N_TASKS];         /* the latest lease of the task (its first before any) */
byte receipt_rev[N_lease];     /* the revision the last command that left a receipt carried */
bit resent[N_lease];           /* after a resume, the worker may resend what it sent before, old revision and all */
bit waits[N_TASKS];            /* set aside while its key was at its limit (tasks.waits_for_key) */
byte workers_done;

/* Ghosts: what happened, for the properties only. */
bit lost[N_TASKS];             /* an attempt of the task expired after it started */
bit confirmed[N_TASKS];        /* the task was CANCELLED (its cancel confirmed) */
byte seen_rev[N_lease];
byte seen_token;
bit opened[N_instance];        /* the session's epoch was compared with every earlier one */
byte top_epoch;                /* the largest epoch handed out so far */

byte i;                        /* scratch, zero between steps */

/* The state properties, watched by a monitor that can only move when one fails. */
#define ONLY_CURRENT_LIVE(l) (!LIVE_LEASE(l) || l == current[TASK_OF(l)])
#define INTENT_CARRIED(t) (!OPEN_INTENT(t) || (RUNNING_TASK(t) && lease_cancel[current[t]]))
#define CANCEL_STAYS(t) (!(confirmed[t] && task_state[t] == task_SUCCEEDED))
#define UNCERTAINTY_KEPT(l) (!(lost[TASK_OF(l)] && LIVE_LEASE(l) && !lease_uncertain[l]))
#define COUNTS_AGAINST_KEY(l) (key_permit_state[l] == key_permit_HELD || key_permit_state[l] == key_permit_QUARANTINED)
#define LIVE_HOLDS_PERMIT(l) (!LIVE_LEASE(l) || key_permit_state[l] == key_permit_HELD)
#define LOST_RUNNER_QUARANTINED(l) (!(running[l] && !LIVE_LEASE(l)) || key_permit_state[l] == key_permit_QUARANTINED)

active proctype invariants() {
end:
  atomic {
    if
    :: !EVERY_lease(ONLY_CURRENT_LIVE) -> printf("PROPERTY single_execution_right\n")
    :: !(EVERY_task(INTENT_CARRIED) && EVERY_task(CANCEL_STAYS)) -> printf("PROPERTY cancel_kept\n")
    :: !EVERY_lease(UNCERTAINTY_KEPT) -> printf("PROPERTY effect_uncertain\n")
    :: !(COUNT_key_permit(COUNTS_AGAINST_KEY) <= KEY_LIMIT && COUNT_key_permit(COUNTS_AGAINST_KEY) == key_outstanding
         && EVERY_lease(LIVE_HOLDS_PERMIT) && EVERY_lease(LOST_RUNNER_QUARANTINED)) -> printf("PROPERTY key_limit\n")
    fi;
    assert(false)
  }
}

/* A token fences only if it is larger than every one before. The key's counter moves once per permit (one key,
   and no permit row is deleted here), and a step's new permits are the ones whose token is not yet compared:
   each must lie above what the counter was before the step. Once compared, the model forgets the token
   (nothing in a chart reads it), so the search does not tell states apart by which permit holds which token:
   SPIN leaves a variable nobody reads out of the state, as it did the token before it was checked. */
#define TAKEN(k) (key_permit_state[k] != key_permit_NONE)
#define TOKEN_UNCOMPARED(k) (TAKEN(k) && key_permit_token[k] != 0)
#define TOKEN_ABOVE(k) (TOKEN_UNCOMPARED(k) && key_permit_token[k] > seen_token && key_permit_token[k] <= key_last_token)
#define TOKENS_GROW (COUNT_key_permit(TAKEN) == key_last_token \
                     && COUNT_key_permit(TOKEN_UNCOMPARED) == key_last_token - seen_token \
                     && COUNT_key_permit(TOKEN_ABOVE) == key_last_token - seen_token)
#define FORGET_TOKEN(k) key_permit_token[k] = 0;
/* A session seen for the first time: its epoch is larger than every one before. */
#define EPOCH_IS_NEW(k) \
  if \
  :: instance_state[k] != instance_NONE && !opened[k] -> \
       if :: instance_epoch[k] <= top_epoch -> printf("PROPERTY fencing_grows\n"); assert(false) :: else fi; \
       top_epoch = instance_epoch[k]; opened[k] = 1 \
  :: else \
  fi;

/* Revisions and tokens only grow: compared with what the last step left. A new permit's token and a new
   session's epoch must also be larger than every one before (a counter that never moves never goes down
   either, but fences nothing); a session's epoch is written once, at its registration, so that check is
   the whole property for epochs. */
inline check_properties() {
  for (i : 0 .. N_lease - 1) {
    if :: lease_revision[i] < seen_rev[i] -> printf("PROPERTY fencing_grows\n"); assert(false) :: else fi;
    seen_rev[i] = lease_revision[i]
  }
  if :: key_last_token < seen_token || !TOKENS_GROW -> printf("PROPERTY fencing_grows\n"); assert(false) :: else fi;
  seen_token = key_last_token;
  i = 0;
  d_step { FOR_key_permit(FORGET_TOKEN) FOR_instance(EPOCH_IS_NEW) skip }
}

/* A step the entry needs and its chart refuses: the charts disagree. */
#define STEP(call, can) if :: can -> call :: else -> printf("PROPERTY steps_agree\n"); assert(false) fi

/* key_permit.release runs task.key_freed: the key's set-aside tasks come back (every task has the one key). */
inline key_freed() {
  for (i : 0 .. N_TASKS - 1) {
    if :: waits[i] -> STEP(APPLY(fire_task_key_freed, IDS(i, 0, 0, 0)), APPLY(task_key_freed_can, IDS(i, 0, 0, 0)));
                      waits[i] = 0
       :: else fi
  };
  i = 0
}

/* The holder learns its lease is gone (a refusal, or its own ttl ran out: the SDK stops the task). */
inline forget(l) { known_rev[l] = 0; running[l] = 0; resent[l] = 0 }

/* lease.start (the task's row stays held); an accepted command must carry the current revision. */
inline start(w, l, t, s) {
  cmd_revision = known_rev[l];
  if
  :: APPLY(lease_start_can, IDS(t, l, s, 0)) ->
       if :: cmd_revision != lease_revision[l] -> printf("PROPERTY revision_current\n"); assert(false) :: else fi;
       APPLY(fire_lease_start, IDS(t, l, s, 0));
       receipt_rev[l] = cmd_revision; known_rev[l] = lease_revision[l]; running[l] = 1
  :: else -> forget(l)
  fi
}

inline renew(w, l, t, s) {
  cmd_revision = known_rev[l];
  if
  :: APPLY(lease_renew_can, IDS(t, l, s, 0)) ->
       if :: cmd_revision != lease_revision[l] -> printf("PROPERTY revision_current\n"); assert(false) :: else fi;
       APPLY(fire_lease_renew, IDS(t, l, s, 0));
       receipt_rev[l] = cmd_revision; known_rev[l] = lease_revision[l]
  :: else -> forget(l)
  fi
}

/* lease.finish + task.finish + key_permit.release + cancellation.resolve (intent open). */
inline finish(w, l, t, s) {
  cmd_revision = known_rev[l];
  if
  :: cmd_status = SUCCEEDED
  :: cmd_status = FAILED; cmd_retryable = 1
  :: cmd_status = CANCELLED
  fi;
  if
  :: APPLY(lease_finish_can, IDS(t, l, s, 0)) ->
       if :: cmd_revision != lease_revision[l] -> printf("PROPERTY revision_current\n"); assert(false) :: else fi;
       APPLY(fire_lease_finish, IDS(t, l, s, 0));
       STEP(APPLY(fire_task_finish, IDS(t, l, s, 0)), APPLY(task_finish_can, IDS(t, l, s, 0)));
       STEP(APPLY(fire_key_permit_release, IDS(t, l, s, 0)), APPLY(key_permit_release_can, IDS(t, l, s, 0)));
       key_freed();
       if :: OPEN_INTENT(t) -> STEP(APPLY(fire_cancellation_resolve, IDS(t, l, s, 0)),
                                    APPLY(cancellation_resolve_can, IDS(t, l, s, 0)))
          :: else fi;
       if :: task_state[t] == task_CANCELLED -> confirmed[t] = 1 :: else fi;
       receipt_rev[l] = cmd_revision; forget(l)
  :: else -> forget(l)
  fi
}

/* worker.resume from the session the worker last knew to own the lease. */
inline resume(w, l, t, s) {
  cmd_old_session = known_owner[l];
  if
  :: APPLY(lease_resume_can, IDS(t, l, s, 0)) ->
       APPLY(fire_lease_resume, IDS(t, l, s, 0));
       known_owner[l] = s; known_rev[l] = lease_revision[l]; resent[l] = 1
  :: else -> forget(l)
  fi
}

/* A command delivered late or twice: it carries the revision before the latest one the worker saw. With a
   receipt for that revision the store answers "duplicate" and hands the lease back only to its current live
   holder; without one (a resume moved the revision) it is a command like any other, which the chart must
   refuse: a start while offered, a finish while running. The worker ignores the answer to a copy. */
inline replay(w, l, t, s) {
  cmd_revision = known_rev[l] - 1;
  if
  :: cmd_revision != 0 && cmd_revision == receipt_rev[l] ->
       if
       :: (APPLY(lease_g_owned_by_session, IDS(t, l, s, 0)) && APPLY(lease_g_lease_live, IDS(t, l, s, 0)) &&
           APPLY(lease_g_not_revoked, IDS(t, l, s, 0)) && lease_state[l] != lease_FINISHED) ->
            if :: !(lease_state[l] == lease_RUNNING || lease_state[l] == lease_OFFERED) || lease_owner[l] != s ->
                    printf("PROPERTY receipt_no_grant\n"); assert(false) :: else fi
       :: else
       fi
  :: else ->
       if
       :: lease_state[l] == lease_OFFERED && APPLY(lease_start_can, IDS(t, l, s, 0)) ->
            printf("PROPERTY revision_current\n"); assert(false)
       :: lease_state[l] == lease_RUNNING && APPLY(lease_finish_can, IDS(t, l, s, 0)) ->
            printf("PROPERTY revision_current\n"); assert(false)
       :: else
       fi
  fi
}

/* What a worker may do with lease l (its guards are the worker's own knowledge; a refusal is news to it). */
#define MINE(l) (sess[w] != 0 && holder[l] == w + 1)
#define MAY_START(l) (MINE(l) && known_rev[l] != 0 && !running[l] && known_owner[l] == sess[w])
#define MAY_RENEW(l) (MINE(l) && running[l] && known_owner[l] == sess[w] && known_rev[l] < REVCAP)
#define MAY_FINISH(l) (MINE(l) && running[l] && known_owner[l] == sess[w])
#define MAY_RESUME(l) (MINE(l) && known_rev[l] != 0 && known_owner[l] != sess[w])
#define MAY_REPLAY(l) (MINE(l) && known_rev[l] > 1 && (faults > 0 || resent[l]))
#define GIVES_UP(l) (holder[l] == w + 1 && running[l] && lease_due[l])

/* A worker connects to its own node, then (after a loss) to the other one, which must be alive. */
#define HOME(w) ((w + used[w]) % 2)
#define CONNECT \
  :: atomic { sess[w] == 0 && used[w] < SPW && !ALL_TASKS_DONE \
              && APPLY(instance_register_can, IDS(0, 0, 1 + w * SPW + used[w], HOME(w))) -> \
       APPLY(fire_instance_register, IDS(0, 0, 1 + w * SPW + used[w], HOME(w))); sess[w] = 1 + w * SPW + used[w]; \
       used[w]++; check_properties(); clear_cmd() }

proctype worker(byte w) {
  byte l;
  do
  CONNECT
  :: atomic { ANY_lease(MAY_START) -> PICK_lease(MAY_START, l);
       start(w, l, TASK_OF(l), sess[w]); check_properties(); clear_cmd(); l = 0 }
  :: atomic { ANY_lease(MAY_RENEW) -> PICK_lease(MAY_RENEW, l);
       renew(w, l, TASK_OF(l), sess[w]); check_properties(); clear_cmd(); l = 0 }
  :: atomic { ANY_lease(MAY_FINISH) -> PICK_lease(MAY_FINISH, l);
       finish(w, l, TASK_OF(l), sess[w]); check_properties(); clear_cmd(); l = 0 }
  :: atomic { ANY_lease(MAY_RESUME) -> PICK_lease(MAY_RESUME, l);
       resume(w, l, TASK_OF(l), sess[w]); check_properties(); clear_cmd(); l = 0 }
  :: atomic { ANY_lease(MAY_REPLAY) -> PICK_lease(MAY_REPLAY, l);
       if :: resent[l] -> resent[l] = 0 :: else -> faults-- fi;
       replay(w, l, TASK_OF(l), sess[w]); check_properties(); clear_cmd(); l = 0 }
  :: atomic { ANY_lease(GIVES_UP) -> PICK_lease(GIVES_UP, l); forget(l); l = 0 }
  :: atomic { sess[w] != 0 && faults > 0 && LIVE_SESSION(sess[w]) ->
       faults--; APPLY(fire_instance_disconnect, IDS(0, 0, sess[w], 0)); sess[w] = 0; check_properties(); clear_cmd() }
  :: ALL_TASKS_DONE -> break
  od;
  atomic {
    if :: sess[w] != 0 && LIVE_SESSION(sess[w]) -> APPLY(fire_instance_disconnect, IDS(0, 0, sess[w], 0)) :: else fi;
    sess[w] = 0; workers_done++; clear_cmd();
    /* the worker stops: whatever it still ran is over (a lost attempt ends with the worker) */
    for (i : 0 .. N_lease - 1) { if :: holder[i] == w + 1 -> forget(i) :: else fi }; i = 0
  }
}

/* lease.assign + key_permit.acquire + task.offer, of task t to worker w's session. */
#define NEXT(t) (t * LPT + next_lease[t])
#define MAY_ASSIGN(t, w) (sess[w] != 0 && next_lease[t] < LPT && !waits[t] \
    && APPLY(lease_assign_can, IDS(t, NEXT(t), sess[w], 0)) && APPLY(key_permit_acquire_can, IDS(t, NEXT(t), sess[w], 0)))
#define MAY_ASSIGN_0(t) MAY_ASSIGN(t, 0)
#define MAY_ASSIGN_1(t) MAY_ASSIGN(t, 1)
/* lease.assign picks a task whose key is at its limit: task.wait_for_key sets it aside instead of offering it. */
#define KEY_FULL_FOR(t, w) (sess[w] != 0 && APPLY(lease_assign_can, IDS(t, NEXT(t), sess[w], 0)) \
    && !APPLY(key_permit_acquire_can, IDS(t, NEXT(t), sess[w], 0)))
#define MAY_WAIT(t) (next_lease[t] < LPT && !waits[t] && (KEY_FULL_FOR(t, 0) || KEY_FULL_FOR(t, 1)))
#define MAY_NOTIFY(t) APPLY(cancellation_notify_can, IDS(t, current[t], 0, 0))
#define MAY_PROMOTE(t) (task_state[t] == task_SCHEDULED)

inline assign(t, w) {
  STEP(APPLY(fire_lease_assign, IDS(t, NEXT(t), sess[w], 0)), true);
  STEP(APPLY(fire_key_permit_acquire, IDS(t, NEXT(t), sess[w], 0)), true);
  STEP(APPLY(fire_task_offer, IDS(t, NEXT(t), sess[w], 0)), APPLY(task_offer_can, IDS(t, NEXT(t), sess[w], 0)));
  holder[NEXT(t)] = w + 1; known_rev[NEXT(t)] = 1; known_owner[NEXT(t)] = sess[w]; current[t] = NEXT(t);
  next_lease[t]++
}

proctype dispatcher() {
  byte t;
  do
  :: atomic { ANY_task(MAY_ASSIGN_0) -> PICK_task(MAY_ASSIGN_0, t); assign(t, 0); check_properties(); clear_cmd(); t = 0 }
  :: atomic { ANY_task(MAY_ASSIGN_1) -> PICK_task(MAY_ASSIGN_1, t); assign(t, 1); check_properties(); clear_cmd(); t = 0 }
  :: atomic { ANY_task(MAY_WAIT) -> PICK_task(MAY_WAIT, t);
       STEP(APPLY(fire_task_wait_for_key, IDS(t, 0, 0, 0)), APPLY(task_wait_for_key_can, IDS(t, 0, 0, 0)));
       waits[t] = 1; check_properties(); clear_cmd(); t = 0 }
  :: atomic { ANY_task(MAY_NOTIFY) -> PICK_task(MAY_NOTIFY, t);
       APPLY(fire_cancellation_notify, IDS(t, current[t], 0, 0)); check_properties(); clear_cmd(); t = 0 }
  :: atomic { ANY_task(MAY_PROMOTE) -> PICK_task(MAY_PROMOTE, t); cmd_due = 1;
       APPLY(fire_task_promote, IDS(t, 0, 0, 0)); check_properties(); clear_cmd(); t = 0 }
  :: ALL_TASKS_DONE -> break
  od
}

/* Nobody keeps the lease alive: its owner session is gone or its holder gave it up. */
#define HOLDER_GONE(l) (!LIVE_SESSION(lease_owner[l]) || known_rev[l] == 0)

/* Clocks and timers: a deadline passes (free when the holder is gone, a fault otherwise), then the sweep. */
#define MAY_TICK(l) (LIVE_LEASE(l) && !lease_due[l] && (HOLDER_GONE(l) || faults > 0))
#define MAY_LAPSE(l) APPLY(lease_lapse_can, IDS(TASK_OF(l), l, 0, 0))
#define MAY_EXPIRE(l) APPLY(lease_expire_can, IDS(TASK_OF(l), l, 0, 0))
#define QUARANTINE_ENDS(l) (key_permit_state[l] == key_permit_QUARANTINED && !running[l])

proctype timers() {
  byte l;
  do
  :: atomic { ANY_lease(MAY_TICK) -> PICK_lease(MAY_TICK, l);
       if :: !HOLDER_GONE(l) -> faults-- :: else fi; lease_due[l] = 1; l = 0 }
  :: atomic { ANY_lease(MAY_LAPSE) -> PICK_lease(MAY_LAPSE, l);
       APPLY(fire_lease_lapse, IDS(TASK_OF(l), l, 0, 0));
       STEP(APPLY(fire_task_lapse, IDS(TASK_OF(l), l, 0, 0)), APPLY(task_lapse_can, IDS(TASK_OF(l), l, 0, 0)));
       STEP(APPLY(fire_key_permit_release, IDS(TASK_OF(l), l, 0, 0)),
            APPLY(key_permit_release_can, IDS(TASK_OF(l), l, 0, 0)));
       key_freed(); check_properties(); clear_cmd(); l = 0 }
  :: atomic { ANY_lease(MAY_EXPIRE) -> PICK_lease(MAY_EXPIRE, l);
       APPLY(fire_lease_expire, IDS(TASK_OF(l), l, 0, 0)); lost[TASK_OF(l)] = 1;
       STEP(APPLY(fire_task_expire, IDS(TASK_OF(l), l, 0, 0)), APPLY(task_expire_can, IDS(TASK_OF(l), l, 0, 0)));
       STEP(APPLY(fire_key_permit_quarantine, IDS(TASK_OF(l), l, 0, 0)),
            APPLY(key_permit_quarantine_can, IDS(TASK_OF(l), l, 0, 0)));
       if :: OPEN_INTENT(TASK_OF(l)) -> STEP(APPLY(fire_cancellation_escalate, IDS(TASK_OF(l), l, 0, 0)),
                                             APPLY(cancellation_escalate_can, IDS(TASK_OF(l), l, 0, 0)))
          :: else fi;
       if :: task_state[TASK_OF(l)] == task_CANCELLED -> confirmed[TASK_OF(l)] = 1 :: else fi;
       check_properties(); clear_cmd(); l = 0 }
  :: atomic { ANY_lease(QUARANTINE_ENDS) -> PICK_lease(QUARANTINE_ENDS, l); key_permit_due[l] = 1;
       STEP(APPLY(fire_key_permit_release_after_quarantine, IDS(TASK_OF(l), l, 0, 0)),
            APPLY(key_permit_release_after_quarantine_can, IDS(TASK_OF(l), l, 0, 0)));
       key_freed(); check_properties(); clear_cmd(); l = 0 }
  :: ALL_TASKS_DONE && ALL_key_permit_SETTLED -> break
  od
}

/* cancellation.request (of task 0: the other one is keyed alike and adds nothing new): at once for a task not started (revoking its offer), else an intent the lease carries. */
#define CANCEL(t) \
  :: atomic { cancels > 0 && APPLY(cancellation_request_can, IDS(t, CUR_LEASE(t), 0, 0)) -> \
       cancels--; APPLY(fire_cancellation_request, IDS(t, CUR_LEASE(t), 0, 0)); \
       if \
       :: RUNNING_TASK(t) -> \
            STEP(APPLY(fire_lease_cancel, IDS(t, CUR_LEASE(t), 0, 0)), APPLY(lease_cancel_can, IDS(t, CUR_LEASE(t), 0, 0))) \
       :: task_state[t] == task_OFFERED && !RUNNING_TASK(t) -> \
            STEP(APPLY(fire_lease_revoke, IDS(t, CUR_LEASE(t), 0, 0)), APPLY(lease_revoke_can, IDS(t, CUR_LEASE(t), 0, 0))); \
            STEP(APPLY(fire_key_permit_release, IDS(t, CUR_LEASE(t), 0, 0)), \
                 APPLY(key_permit_release_can, IDS(t, CUR_LEASE(t), 0, 0))); \
            key_freed(); \
            STEP(APPLY(fire_task_cancel, IDS(t, CUR_LEASE(t), 0, 0)), APPLY(task_cancel_can, IDS(t, CUR_LEASE(t), 0, 0))); \
            confirmed[t] = 1 \
       :: else -> \
            STEP(APPLY(fire_task_cancel, IDS(t, CUR_LEASE(t), 0, 0)), APPLY(task_cancel_can, IDS(t, CUR_LEASE(t), 0, 0))); \
            waits[t] = 0; confirmed[t] = 1 \
       fi; \
       check_properties(); clear_cmd() }

proctype producer() {
  do
  CANCEL(0)
  :: ALL_TASKS_DONE -> break
  :: cancels == 0 -> break
  od
}

/* Server processes: a heartbeat may lapse (a fault); another node then declares it lost and its sessions
   disconnected; the node finds out, tells its connections to go (the workers reconnect) and rejoins. */
#define NODE(n) \
  :: atomic { node_state[n] == node_ALIVE && !node_due[n] && faults > 0 -> faults--; node_due[n] = 1 } \
  :: atomic { node_state[n] == node_ALIVE && node_due[n] && APPLY(node_heartbeat_can, IDS(0, 0, 0, n)) -> \
       APPLY(fire_node_heartbeat, IDS(0, 0, 0, n)); clear_cmd() } \
  :: atomic { node_state[n] == node_ALIVE && node_due[n] -> cmd_by_node = 1 - n; \
       STEP(APPLY(fire_node_lose, IDS(0, 0, 0, n)), APPLY(node_lose_can, IDS(0, 0, 0, n))); \
       for (k : 1 .. N_instance - 1) { \
         if :: instance_node[k] == n && APPLY(instance_node_gone_can, IDS(0, 0, k, n)) -> \
                 APPLY(fire_instance_node_gone, IDS(0, 0, k, n)) :: else fi \
       }; k = 0; check_properties(); clear_cmd() } \
  :: atomic { node_state[n] == node_LOST -> \
       APPLY(fire_node_rejoin, IDS(0, 0, 0, n)); \
       if :: sess[0] != 0 && instance_node[sess[0]] == n -> sess[0] = 0 :: else fi; \
       if :: sess[1] != 0 && instance_node[sess[1]] == n -> sess[1] = 0 :: else fi; \
       check_properties(); clear_cmd() }

proctype nodes() {
  byte k;
  do
  FOR_node(NODE)
  :: workers_done == N_WORKERS -> break
  od;
  atomic {
    for (k : 0 .. N_node - 1) { APPLY(fire_node_stop, IDS(0, 0, 0, k)) }; k = 0; clear_cmd()
  }
}

/* When nothing can move any more, every row must have settled (no_dead_end, and terminates). */
active proctype quiescence() {
  timeout ->
    if :: !ALL_TASKS_DONE -> printf("PROPERTY terminates\n"); assert(false) :: else fi;
    if :: !ALL_SETTLED -> printf("PROPERTY no_dead_end\n"); assert(false) :: else fi
}

init {
  atomic {
    for (i : 0 .. N_node - 1) { APPLY(fire_node_start, IDS(0, 0, 0, i)) };
    for (i : 0 .. N_TASKS - 1) { cmd_due = 1; APPLY(fire_task_submit, IDS(i, 0, 0, 0)); current[i] = i * LPT };
    /* each worker opens its first session on its own node */
    for (i : 0 .. N_WORKERS - 1) {
      APPLY(fire_instance_register, IDS(0, 0, 1 + i * SPW, i)); sess[i] = 1 + i * SPW; used[i] = 1
    };
    i = 0; clear_cmd();
    run nodes(); run timers(); run dispatcher(); run producer(); run worker(0); run worker(1)
  }
}

ltl terminates { <> ALL_TASKS_DONE }
