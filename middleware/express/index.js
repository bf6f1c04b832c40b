'use strict'

// A store for express-rate-limit backed by sluice. Each hit is one RL.*
// command (RL.FIXED by default, the fixed window express-rate-limit's own
// MemoryStore uses), so the count is shared by every server that talks to
// the same sluice, with no Lua. express-rate-limit then answers 429 and sets
// Retry-After and the RateLimit fields (standardHeaders: 'draft-8') from
// what the store returns, itself built from sluice's five-integer reply.
//
// The store talks to sluice through sendCommand, so any client works:
//   node-redis: sendCommand: (...args) => client.sendCommand(args)
//   ioredis:    sendCommand: (...args) => client.call(...args)

const COMMANDS = new Set(['RL.FIXED', 'RL.SLIDING', 'RL.LOG'])

class SluiceStore {
	/**
	 * @param {object} options
	 * @param {(...args: string[]) => Promise<unknown>} options.sendCommand sends one command to sluice.
	 * @param {string} [options.prefix] put before every key (default 'rl:').
	 * @param {string} [options.command] 'RL.FIXED' (default), 'RL.SLIDING' or 'RL.LOG'.
	 * @param {number} [options.limit] requests per window; by default the middleware's limit (a number).
	 * @param {number} [options.windowMs] the window; by default the middleware's windowMs.
	 */
	constructor(options = {}) {
		if (typeof options.sendCommand !== 'function') {
			throw new TypeError('SluiceStore: options.sendCommand must be a function sending one command to sluice')
		}
		this.sendCommand = options.sendCommand
		this.prefix = options.prefix ?? 'rl:'
		this.command = (options.command ?? 'RL.FIXED').toUpperCase()
		if (!COMMANDS.has(this.command)) {
			throw new TypeError(`SluiceStore: command must be one of ${[...COMMANDS].join(', ')}`)
		}
		this.limit = options.limit
		this.windowMs = options.windowMs
		// Counts live in sluice, shared by every instance.
		this.localKeys = false
	}

	/** Takes the middleware's limit and window unless given to the store. */
	init(options) {
		this.windowMs ??= options.windowMs
		if (this.limit === undefined) {
			const limit = options.limit ?? options.max
			if (typeof limit !== 'number') {
				throw new TypeError('SluiceStore: the middleware\'s limit is a function: give the store its own limit')
			}
			this.limit = limit
		}
	}

	args(key, cost) {
		const args = [this.command, this.prefix + key, String(this.limit), `${Math.max(1, Math.round(this.windowMs))}ms`]
		if (cost !== undefined) args.push('COST', String(cost))
		return args
	}

	/** Turns sluice's reply [allowed, limit, remaining, retry_after_ms, reset_after_ms] into a hit count. */
	static info(reply) {
		if (!Array.isArray(reply) || reply.length !== 5) {
			throw new Error(`SluiceStore: unexpected reply ${JSON.stringify(reply)}`)
		}
		const [allowed, limit, remaining, retryMs, resetMs] = reply.map(Number)
		// A denied request consumes nothing in sluice; express-rate-limit
		// denies when totalHits > limit.
		const totalHits = allowed === 1 ? limit - remaining : limit + 1
		// For a denial, when the next request is allowed (for RL.FIXED,
		// the end of the window either way).
		const ms = allowed === 1 ? resetMs : retryMs >= 0 ? retryMs : resetMs
		return { totalHits, resetTime: new Date(Date.now() + ms) }
	}

	async increment(key) {
		return SluiceStore.info(await this.sendCommand(...this.args(key)))
	}

	async get(key) {
		const reply = await this.sendCommand('RL.PEEK', this.prefix + key)
		if (reply === null || reply === undefined) return undefined
		return SluiceStore.info(reply)
	}

	/** Gives the unit back (a refund: sluice's negative COST). */
	async decrement(key) {
		await this.sendCommand(...this.args(key, -1))
	}

	async resetKey(key) {
		await this.sendCommand('RL.RESET', this.prefix + key)
	}
}

module.exports = { SluiceStore }
module.exports.default = SluiceStore
